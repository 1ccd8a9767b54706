package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/diskspace"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/systemd"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy/tenancytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/transport"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

func TestConfigCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(f *fixture)
		want  want
	}{
		{"loads", func(*fixture) {}, want{status: OK, detail: []string{"config.yaml loads", "env env-qa-02", "transport sdk"}}},
		{"unknown key", func(f *fixture) {
			_, err := config.Parse([]byte("env_id: env-qa-02\ntenancy:\n  prot: 443\n"), "/etc/monky-deployd/config.yaml")
			f.env.Config, f.env.ConfigErr = nil, err
		}, want{status: Fail, detail: []string{"tenancy.prot", "/etc/monky-deployd/config.yaml"}, fix: []string{"config.example.yaml"}}},
		{"missing file", func(f *fixture) {
			_, err := config.Load(filepath.Join(f.dir, "absent.yaml"))
			f.env.Config, f.env.ConfigErr = nil, err
		}, want{status: Fail, detail: []string{"absent.yaml"}, fix: []string{"install.sh"}}},
		{"loads for root but the agent cannot read it", func(f *fixture) {
			f.asRoot()
			f.fs.stat[f.cfg().Path] = FileInfo{Mode: 0o600}
		}, want{status: Fail, detail: []string{"loads for root", "monky-deployd cannot read"}, fix: []string{"chgrp monky-deployd", "chmod 0640"}}},
		{"root, the agent reads it through its group", func(f *fixture) {
			f.asRoot()
			f.fs.stat[f.cfg().Path] = FileInfo{Mode: 0o640, GID: agentGID}
		}, want{status: OK}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "")
			tc.setup(f)
			tc.want.assert(t, f.check("config"))
		})
	}
}

func TestConfigThatDoesNotLoadIsTheOnlyCheck(t *testing.T) {
	checks := Checks(&Env{ConfigPath: "/x.yaml", ConfigErr: errors.New("config /x.yaml: bad")})
	if len(checks) != 1 || checks[0].Name != "config" {
		t.Fatalf("checks = %d, want the config check alone", len(checks))
	}
	rs, allOK := Run(context.Background(), checks)
	if allOK || rs[0].Status != Fail || rs[0].Detail != "config /x.yaml: bad" {
		t.Errorf("Run = %+v, %t", rs, allOK)
	}
}

func TestUserCheck(t *testing.T) {
	f := newFixture(t, "")
	want{status: OK, detail: []string{"monky-deployd (uid 998)", "docker", "ziti"}}.assert(t, f.check("user"))
	f.asRoot()
	want{status: OK, detail: []string{"doctor runs as root", "judged by monky-deployd's permissions"}}.assert(t, f.check("user"))

	f.env.Agent, f.env.AgentErr = nil, errors.New("user: unknown user monky-deployd")
	want{status: Fail, detail: []string{"monky-deployd", "unknown user"}, fix: []string{"--user"}}.assert(t, f.check("user"))
}

func TestIdentityChecks(t *testing.T) {
	for _, tc := range []struct {
		name          string
		extra         string
		setup         func(f *fixture)
		identity      want
		identityGroup want
	}{
		{"install.sh's layout, agent runs doctor", "", func(*fixture) {},
			want{status: OK, detail: []string{"readable by monky-deployd", "usable certificate and key"}},
			want{status: OK, detail: []string{"ziti:ziti 0640", "in group ziti", "survives a tunneller rewrite"}}},
		{"install.sh's layout, root runs doctor", "", func(f *fixture) { f.asRoot() },
			want{status: OK, detail: []string{"readable by monky-deployd"}},
			want{status: OK}},
		{"missing", "", func(f *fixture) { os.Remove(f.cfg().Identity); delete(f.fs.stat, f.cfg().Identity) },
			want{status: Fail, detail: []string{"does not exist"}, fix: []string{"--enrol-jwt monky-host.env-qa-02.jwt", "fleetctl onboard env-qa-02 --reissue"}},
			want{status: Fail, detail: []string{"does not exist"}}},
		{"unreadable by this uid", "", func(f *fixture) {
			f.fs.readErr[f.cfg().Identity] = &fs.PathError{Op: "open", Path: f.cfg().Identity, Err: fs.ErrPermission}
			f.fs.stat[f.cfg().Identity] = FileInfo{Mode: 0o640, UID: zitiUID, GID: zitiGID, ACL: true}
			f.env.Agent.GIDs = []uint32{agentGID, dockerGID}
		},
			want{status: Fail, detail: []string{"not readable by monky-deployd"}, fix: []string{"usermod -a -G ziti monky-deployd", "drops ACLs"}},
			want{status: Fail, detail: []string{"not in group ziti", "rests on an ACL"}, fix: []string{"usermod -a -G ziti monky-deployd", "drops ACLs"}}},
		{"root runs doctor, file 0600 without ACL", "", func(f *fixture) {
			f.asRoot()
			f.fs.stat[f.cfg().Identity] = FileInfo{Mode: 0o600, UID: zitiUID, GID: zitiGID}
		},
			want{status: Fail, detail: []string{"monky-deployd cannot read", "ziti:ziti 0600"}, fix: []string{"usermod -a -G ziti"}},
			want{status: Fail, detail: []string{"group ziti has no read"}, fix: []string{"chmod g+r"}}},
		{"root runs doctor, read only through an ACL", "", func(f *fixture) {
			f.asRoot()
			f.fs.stat[f.cfg().Identity] = FileInfo{Mode: 0o640, UID: zitiUID, GID: zitiGID, ACL: true}
			f.fs.aclGrants[f.cfg().Identity] = true
			f.env.Agent.GIDs = []uint32{agentGID, dockerGID}
		},
			want{status: OK, detail: []string{"only an ACL grants it"}},
			want{status: Fail, detail: []string{"monky-deployd is not in group ziti", "rests on an ACL"}, fix: []string{"usermod -a -G ziti monky-deployd"}}},
		{"root runs doctor, an ACL for someone else", "", func(f *fixture) {
			f.asRoot()
			f.fs.stat[f.cfg().Identity] = FileInfo{Mode: 0o640, UID: zitiUID, GID: zitiGID, ACL: true}
			f.env.Agent.GIDs = []uint32{agentGID, dockerGID}
		},
			want{status: Fail, detail: []string{"monky-deployd cannot read", "+acl"}, fix: []string{"usermod -a -G ziti monky-deployd"}},
			want{status: Fail, detail: []string{"monky-deployd is not in group ziti", "rests on an ACL"}, fix: []string{"usermod -a -G ziti monky-deployd"}}},
		{"root runs doctor, directory closed", "", func(f *fixture) {
			f.asRoot()
			f.fs.stat[filepath.Dir(f.cfg().Identity)] = FileInfo{Mode: fs.ModeDir | 0o700, UID: zitiUID, GID: zitiGID}
		},
			want{status: Fail, detail: []string{"cannot enter", "ziti:ziti 0700"}},
			want{status: OK}},
		{"group root", "", func(f *fixture) {
			f.fs.stat[f.cfg().Identity] = FileInfo{Mode: 0o600, UID: 0, GID: 0, ACL: true}
		},
			want{status: OK},
			want{status: Fail, detail: []string{"group root"}, fix: []string{"chgrp ziti", "chmod 0640", "usermod -a -G ziti monky-deployd"}}},
		{"owned by the agent", "", func(f *fixture) {
			f.fs.stat[f.cfg().Identity] = FileInfo{Mode: 0o600, UID: agentUID, GID: agentGID}
		},
			want{status: OK},
			want{status: OK, detail: []string{"monky-deployd owns it"}}},
		{"not JSON", "", func(f *fixture) { write(f.t, f.cfg().Identity, "{", 0o640) },
			want{status: Fail, detail: []string{"not valid JSON"}, fix: []string{"--reissue"}},
			want{status: OK}},
		{"proxy transport reads it too", "transport: proxy\n", func(f *fixture) { f.fs.stat[f.cfg().Identity] = FileInfo{Mode: 0o640, UID: zitiUID, GID: 0o1234} },
			want{status: OK},
			want{status: Fail, detail: []string{"not in group"}}},
		{"transport system", "transport: system\n", func(f *fixture) { os.Remove(f.cfg().Identity) },
			want{status: Skip, detail: []string{"ziti-edge-tunnel holds the identity"}},
			want{status: Skip, detail: []string{"transport system"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.extra)
			tc.setup(f)
			tc.identity.assert(t, f.check("identity"))
			tc.identityGroup.assert(t, f.check("identity-group"))
		})
	}
}

func TestIdentityNeverQuotesKeyMaterial(t *testing.T) {
	f := newFixture(t, "")
	// A certificate that does not parse: the error must name the field, not print the PEM.
	write(t, f.cfg().Identity, `{"ztAPI":"https://c:1","id":{"cert":"pem:-----BEGIN CERTIFICATE-----\nU0VDUkVUS0VZTUFURVJJQUw=\n-----END CERTIFICATE-----\n","key":"pem:x"}}`, 0o640)
	r := f.check("identity")
	if r.Status != Fail || strings.Contains(r.Detail+r.Fix, "U0VDUkVU") {
		t.Errorf("result %+v", r)
	}
}

func TestDockerCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(f *fixture)
		want  want
	}{
		{"reachable", func(f *fixture) { f.expectInfo() },
			want{status: OK, detail: []string{"engine 29.0.1", "docker-root"}}},
		{"root: reachable, and the agent through group docker", func(f *fixture) { f.asRoot(); f.expectInfo() },
			want{status: OK, detail: []string{"as root", "monky-deployd reaches it through group docker"}}},
		{"root: the agent not in group docker (docker installed after the agent)", func(f *fixture) {
			f.asRoot()
			f.expectInfo()
			f.env.Agent.GIDs = []uint32{agentGID, zitiGID}
		}, want{status: Fail, detail: []string{"monky-deployd cannot use"}, fix: []string{"usermod -a -G docker monky-deployd (the next tick picks it up"}}},
		{"docker missing", func(f *fixture) {
			f.run.ExpectPrefix("docker", nil).Fails(fmt.Errorf("runner: start docker: %w", runner.ErrNotFound))
		}, want{status: Fail, detail: []string{`"docker" is not installed`}, fix: []string{"install docker", "docker_bin"}}},
		{"socket permission", func(f *fixture) {
			f.run.ExpectPrefix("docker", []string{"info"}).Returns("", "permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock\n", 1)
		}, want{status: Fail, detail: []string{"may not use the docker socket"}, fix: []string{"usermod -a -G docker monky-deployd"}}},
		{"engine down", func(f *fixture) {
			f.run.ExpectPrefix("docker", []string{"info"}).Returns("", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?\n", 1)
		}, want{status: Fail, detail: []string{"not running"}, fix: []string{"systemctl enable --now docker"}}},
		{"engine hung", func(f *fixture) {
			f.run.ExpectPrefix("docker", []string{"info"}).Do(func(ctx context.Context, _ runner.Cmd) (runner.Result, error) {
				<-ctx.Done()
				return runner.Result{ExitCode: -1}, fmt.Errorf("runner: docker: %w", ctx.Err())
			})
		}, want{status: Fail, detail: []string{"did not answer"}, fix: []string{"systemctl status docker"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "")
			tc.setup(f)
			var r Result
			if tc.name == "engine hung" {
				// A deadline already past: the check gives up at once, as it would after DockerTimeout.
				ctx, cancel := context.WithDeadline(context.Background(), time.Unix(1, 0))
				defer cancel()
				c := findCheck(t, f, "docker")
				rs, _ := Run(ctx, []Check{c})
				r = rs[0]
			} else {
				r = f.check("docker")
			}
			tc.want.assert(t, r)
			for _, call := range f.run.Calls() {
				if call.Name != f.cfg().DockerBin {
					continue // setpriv and test try the access; they run no docker
				}
				if v, ok := call.Getenv("DOCKER_CONFIG"); !ok || v != f.cfg().DockerConfigDir() {
					t.Errorf("%s ran with DOCKER_CONFIG=%q, want %s", call.Cmd, v, f.cfg().DockerConfigDir())
				}
			}
		})
	}
}

func findCheck(t *testing.T, f *fixture, name string) Check {
	t.Helper()
	for _, c := range Checks(f.env) {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no check %q", name)
	return Check{}
}

func TestComposeCheck(t *testing.T) {
	notACommand := "docker: 'compose' is not a docker command.\nSee 'docker --help'\n"
	for _, tc := range []struct {
		name   string
		stdout string
		stderr string
		code   int
		setup  func(f *fixture)
		want   want
	}{
		{"v2 in a system plugin dir", "2.40.3\n", "", 0, nil,
			want{status: OK, detail: []string{"docker compose 2.40.3", "cli-plugins/docker-compose", "DOCKER_CONFIG="}}},
		{"a later major", "v5.0.0\n", "", 0, nil, want{status: OK, detail: []string{"5.0.0"}}},
		{"plugin only in ~/.docker/cli-plugins", "", notACommand, 1, func(f *fixture) { f.env.PluginDirs = []string{filepath.Join(f.dir, "empty")} },
			want{status: Fail, detail: []string{"does not exist with DOCKER_CONFIG="}, fix: []string{"docker-compose-plugin", "~/.docker/cli-plugins"}}},
		{"compose v1", "1.29.2\n", "", 0, nil,
			want{status: Fail, detail: []string{"compose v1"}, fix: []string{"docker-compose-plugin"}}},
		{"works, but from no system plugin dir", "2.40.3\n", "", 0, func(f *fixture) { f.env.PluginDirs = []string{filepath.Join(f.dir, "empty")} },
			want{status: Fail, detail: []string{"from none of"}, fix: []string{"system-wide"}}},
		{"garbage version", "Docker Compose version v2.40.3\n", "", 0, nil,
			want{status: Fail, detail: []string{"unexpected output"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "")
			if tc.setup != nil {
				tc.setup(f)
			}
			f.run.Expect("docker", []string{"compose", "version", "--short"}).Returns(tc.stdout, tc.stderr, tc.code)
			tc.want.assert(t, f.check("compose"))
			for _, call := range f.run.Calls() {
				if v, _ := call.Getenv("DOCKER_CONFIG"); v != f.cfg().DockerConfigDir() {
					t.Errorf("compose version ran with DOCKER_CONFIG=%q", v)
				}
			}
		})
	}
}

func TestDockerConfigCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(f *fixture, dir string)
		want  want
	}{
		{"absent, creatable", func(*fixture, string) {},
			want{status: OK, detail: []string{"does not exist yet", "creates it 0700"}}},
		{"absent, and no state dir", func(f *fixture, _ string) { os.RemoveAll(f.cfg().StateDir) },
			want{status: Fail, detail: []string{"neither"}, fix: []string{"install -d -m 0700 -o monky-deployd"}}},
		{"absent, state dir not the agent's", func(f *fixture, _ string) {
			f.fs.stat[f.cfg().StateDir] = FileInfo{Mode: fs.ModeDir | 0o755}
		}, want{status: Fail, detail: []string{"cannot create it", "root:root 0755"}, fix: []string{"chown monky-deployd:monky-deployd"}}},
		{"0700 with a 0600 credential", func(f *fixture, dir string) {
			mkdir(f.t, dir, 0o700)
			write(f.t, filepath.Join(dir, "config.json"), "{}", 0o600)
		}, want{status: OK, detail: []string{"is 0700", "config.json 0600"}}},
		{"0755", func(f *fixture, dir string) { mkdir(f.t, dir, 0o755) },
			want{status: Fail, detail: []string{"mode 0755, want 0700"}, fix: []string{"chmod 0700 " + "DIR"}}},
		{"owned by root", func(f *fixture, dir string) {
			mkdir(f.t, dir, 0o700)
			f.fs.stat[dir] = FileInfo{Mode: fs.ModeDir | 0o700}
		}, want{status: Fail, detail: []string{"owned by root, not monky-deployd"}, fix: []string{"chown -R monky-deployd:monky-deployd"}}},
		{"credential 0644", func(f *fixture, dir string) {
			mkdir(f.t, dir, 0o700)
			write(f.t, filepath.Join(dir, "config.json"), "{}", 0o644)
		}, want{status: Fail, detail: []string{"config.json is mode 0644, want 0600", "registry credential"}, fix: []string{"chmod 0600"}}},
		{"a file, not a directory", func(f *fixture, dir string) { write(f.t, dir, "", 0o600) },
			want{status: Fail, detail: []string{"not a directory"}, fix: []string{"rm "}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "")
			dir := f.cfg().DockerConfigDir()
			tc.setup(f, dir)
			for i, s := range tc.want.fix {
				tc.want.fix[i] = strings.ReplaceAll(s, "DIR", dir)
			}
			r := f.check("docker-config")
			tc.want.assert(t, r)
			if strings.Contains(r.Detail+r.Fix, "{}") {
				t.Errorf("the credential's content leaked: %+v", r)
			}
		})
	}
}

func TestDiskCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(f *fixture)
		want  want
	}{
		{"both roots clear the headroom", func(f *fixture) { f.expectInfo() },
			want{status: OK, detail: []string{"data-root", "90.0 GiB free", "containerd_root", "50.0 GiB free", "headroom 2.0 GiB"}}},
		{"containerd's disk is the full one", func(f *fixture) {
			f.expectInfo()
			f.free[f.cfg().ContainerdRoot] = 1536 << 20
			f.free[f.dir+"/docker-root"] = 93 * gib
		}, want{status: Fail, detail: []string{"under the headroom", "1.5 GiB free", "93.0 GiB free"}, fix: []string{"at least 2.0 GiB", "containerd", "docker image prune -a"}}},
		{"low data-root", func(f *fixture) {
			f.expectInfo()
			f.free[f.dir+"/docker-root"] = 100 << 20
		}, want{status: Fail, detail: []string{"100.0 MiB free"}, fix: []string{"docker-root"}}},
		{"no containerd root on this engine", func(f *fixture) {
			f.expectInfo()
			delete(f.free, f.cfg().ContainerdRoot)
		}, want{status: OK, detail: []string{"does not exist (not used by this engine)"}}},
		{"docker info failed: the default data-root", func(f *fixture) {
			f.run.ExpectPrefix("docker", []string{"info"}).Returns("", "Cannot connect to the Docker daemon\n", 1)
			f.free["/var/lib/docker"] = 10 * gib
		}, want{status: OK, detail: []string{"/var/lib/docker 10.0 GiB free", "default data-root"}}},
		{"cannot measure", func(f *fixture) {
			f.expectInfo()
			f.env.Meter = failingMeter{}
		}, want{status: Fail, detail: []string{"cannot measure"}}},
		{"state_dir is measured too", func(f *fixture) { f.expectInfo() },
			want{status: OK, detail: []string{"state_dir STATE 80.0 GiB free", "tightest image storage 50.0 GiB (containerd_root)"}}},
		// A tick never measures state_dir: on its own filesystem it is held to StateDirFloor,
		// not to the image headroom, and it is never the "tightest" a tick would report.
		{"state_dir on its own disk under the headroom but over its floor", func(f *fixture) {
			f.expectInfo()
			f.free[f.cfg().StateDir] = 512 << 20
		}, want{status: OK, detail: []string{"state_dir STATE 512.0 MiB free", "tightest image storage 50.0 GiB (containerd_root)"}}},
		{"state_dir's disk is the full one", func(f *fixture) {
			f.expectInfo()
			f.free[f.cfg().StateDir] = 100 << 20
		}, want{status: Fail, detail: []string{"state_dir under 256.0 MiB", "state_dir STATE 100.0 MiB free"},
			fix: []string{"at least 256.0 MiB on the filesystem of STATE", "a tick does not measure it"}}},
		{"state_dir not made yet: its parent is measured", func(f *fixture) {
			f.expectInfo()
			os.RemoveAll(f.cfg().StateDir)
			delete(f.free, f.cfg().StateDir)
			f.free[f.dir] = 70 * gib
		}, want{status: OK, detail: []string{"state_dir STATE (measured at " + "DIR) 70.0 GiB free"}}},
		{"state_dir on the data-root's filesystem: one line", func(f *fixture) {
			f.expectInfo()
			root := f.dir + "/docker-root"
			f.fs.stat[root] = FileInfo{Mode: fs.ModeDir | 0o710}
			f.fs.dev[root], f.fs.dev[f.cfg().StateDir], f.fs.dev[f.cfg().ContainerdRoot] = 7, 7, 8
			f.free[root], f.free[f.cfg().StateDir] = 90*gib, 90*gib
		}, want{status: OK, detail: []string{"data-root ROOT and state_dir STATE (one filesystem) 90.0 GiB free, containerd_root"}}},
		{"all on one filesystem, and full", func(f *fixture) {
			f.expectInfo()
			root := f.dir + "/docker-root"
			f.fs.stat[root] = FileInfo{Mode: fs.ModeDir | 0o710}
			f.fs.dev[root], f.fs.dev[f.cfg().StateDir], f.fs.dev[f.cfg().ContainerdRoot] = 7, 7, 7
			f.free[root], f.free[f.cfg().StateDir], f.free[f.cfg().ContainerdRoot] = gib, gib, gib
		}, want{status: Fail, detail: []string{"data-root ROOT and containerd_root CTRD and state_dir STATE (one filesystem) 1.0 GiB free; headroom"},
			fix: []string{"filesystem of ROOT and CTRD and STATE:"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "")
			tc.setup(f)
			r := strings.NewReplacer("STATE", f.cfg().StateDir, "ROOT", f.dir+"/docker-root", "CTRD", f.cfg().ContainerdRoot, "DIR", f.dir)
			for _, l := range [][]string{tc.want.detail, tc.want.fix} {
				for i, s := range l {
					l[i] = r.Replace(s)
				}
			}
			tc.want.assert(t, f.check("disk"))
		})
	}
}

type failingMeter struct{}

func (failingMeter) Tightest([]string) (int64, []diskspace.Measure, error) {
	return 0, nil, errors.New("statfs: input/output error")
}

func TestDockerInfoRunsOnceForDockerAndDisk(t *testing.T) {
	f := newFixture(t, "")
	f.expectInfo() // Times(1): a second `docker info` fails the test at cleanup
	checks := Checks(f.env)
	var picked []Check
	for _, c := range checks {
		if c.Name == "docker" || c.Name == "disk" {
			picked = append(picked, c)
		}
	}
	if rs, allOK := Run(context.Background(), picked); !allOK {
		t.Errorf("results %+v", rs)
	}
}

func TestTimerCheck(t *testing.T) {
	tr, fa := true, false
	for _, tc := range []struct {
		name  string
		extra string
		timer *protocol.Timer
		want  want
	}{
		{"enabled and active", "", &protocol.Timer{Enabled: &tr, Active: &tr}, want{status: OK, detail: []string{"enabled and active"}}},
		{"disabled by an upgrade", "", &protocol.Timer{Enabled: &fa, Active: &fa},
			want{status: Fail, detail: []string{"enabled=false active=false"}, fix: []string{"systemctl enable --now monky-deployd.timer"}}},
		{"active but not enabled", "", &protocol.Timer{Enabled: &fa, Active: &tr},
			want{status: Fail, detail: []string{"after the next reboot"}, fix: []string{"systemctl enable --now"}}},
		{"no systemd", "", &protocol.Timer{}, want{status: Fail, detail: []string{"nothing runs tick"}, fix: []string{"laptop_mode"}}},
		{"no systemd, laptop", "laptop_mode: true\n", &protocol.Timer{}, want{status: Skip, detail: []string{"laptop_mode"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.extra)
			f.tm = tc.timer
			tc.want.assert(t, f.check("timer"))
		})
	}
}

func TestTimerCheckThroughSystemctl(t *testing.T) {
	f := newFixture(t, "")
	booted := t.TempDir()
	f.run.ExpectPrefix("systemctl", []string{"show", systemd.TimerUnit}).Returns("UnitFileState=disabled\nActiveState=inactive\nNextElapseUSecRealtime=\nNextElapseUSecMonotonic=\n", "", 0)
	f.env.Timer = func(ctx context.Context) *protocol.Timer {
		return systemd.Probe{Runner: f.run, BootedDir: booted}.TimerState(ctx, systemd.TimerUnit, f.env.Now())
	}
	want{status: Fail, detail: []string{"enabled=false"}, fix: []string{"systemctl enable --now monky-deployd.timer"}}.assert(t, f.check("timer"))
}

func TestTenancyCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(f *fixture, r *remote)
		want  want
	}{
		{"token accepted", func(*fixture, *remote) {},
			want{status: OK, detail: []string{"accepted the token", "env env-qa-02", "action=none"}}},
		{"token superseded, bootstrap grant on disk", func(f *fixture, r *remote) {
			r.tenancy.SupersedeJTI("jti-1")
			write(f.t, f.cfg().BootstrapFile, "eyJhbGciOi.grant.sig", 0o600)
		}, want{status: Fail, detail: []string{"AGENT_UNAUTHENTICATED"}, fix: []string{"monky-deployd tick", "bootstrap.jwt"}}},
		{"token superseded, nothing to bootstrap with", func(_ *fixture, r *remote) { r.tenancy.SupersedeJTI("jti-1") },
			want{status: Fail, detail: []string{"refused the token"}, fix: []string{"fleetctl onboard env-qa-02 --reissue"}}},
		{"token of another env", func(f *fixture, r *remote) {
			write(f.t, f.cfg().TokenPath(), r.bao.IssueToken("env-other", "jti-2"), 0o600)
		}, want{status: Fail, detail: []string{"another env"}, fix: []string{"env_id"}}},
		{"a proxy's 401 without the code", func(_ *fixture, r *remote) {
			r.tenancy.FailNext(tenancytest.Checkin, http.StatusUnauthorized, "", 1)
		}, want{status: Fail, detail: []string{"not tenancy", "HTTP 401"}, fix: []string{"ingress or auth proxy", "keeps its token"}}},
		{"tenancy failing", func(_ *fixture, r *remote) {
			r.tenancy.FailNext(tenancytest.Checkin, http.StatusServiceUnavailable, "", 1)
		},
			want{status: Fail, detail: []string{"reachable but failing", "HTTP 503"}, fix: []string{"tenancy's side"}}},
		{"tenancy unreachable (sdk)", func(f *fixture, r *remote) {
			r.tenancy.Close()
			f.env.Tenancy = tenancy.New(r.tenancy.URL, nil)
		}, want{status: Fail, detail: []string{"unreachable"}, fix: []string{"monky-host.env-qa-02 online"}}},
		{"service not visible to the identity", func(f *fixture, _ *remote) {
			f.env.Tenancy = errTenancy{&transport.ServiceError{Service: "monky.tenancy.deploy", Reason: "not visible", Kind: transport.ErrServiceNotVisible}}
		}, want{status: Fail, fix: []string{"fleetctl repair-attrs env-qa-02"}}},
		{"no token yet, bootstrap grant on disk", func(f *fixture, _ *remote) {
			os.Remove(f.cfg().TokenPath())
			write(f.t, f.cfg().BootstrapFile, "eyJhbGciOi.grant.sig", 0o600)
		}, want{status: OK, detail: []string{"anonymous probe", "401 AGENT_UNAUTHENTICATED", "first tick logs in"}}},
		{"no token, tenancy unreachable", func(f *fixture, r *remote) {
			os.Remove(f.cfg().TokenPath())
			write(f.t, f.cfg().BootstrapFile, "eyJhbGciOi.grant.sig", 0o600)
			r.tenancy.Close()
		}, want{status: Fail, detail: []string{"unreachable"}}},
		{"no token and no grant", func(f *fixture, _ *remote) { os.Remove(f.cfg().TokenPath()) },
			want{status: Fail, detail: []string{"nothing to authenticate with"}, fix: []string{"re-run the install kit"}}},
		{"token unreadable", func(f *fixture, _ *remote) {
			os.Remove(f.cfg().TokenPath())
			mkdir(f.t, f.cfg().TokenPath(), 0o700) // reading a directory fails like a closed file would
		}, want{status: Fail, detail: []string{"bao.token"}}},
		{"transport could not be built", func(f *fixture, _ *remote) {
			f.env.TransportErr = &transport.IdentityError{Path: f.cfg().Identity, Reason: "does not exist", Kind: transport.ErrIdentityMissing}
		}, want{status: Fail, detail: []string{"cannot dial tenancy"}, fix: []string{"see identity"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "")
			r := f.remote()
			tc.setup(f, r)
			res := f.check("tenancy")
			tc.want.assert(t, res)
			if strings.Contains(res.Detail+res.Fix, r.token) || strings.Contains(res.Detail+res.Fix, "grant.sig") {
				t.Errorf("a secret leaked: %+v", res)
			}
		})
	}
}

type errTenancy struct{ err error }

func (e errTenancy) Checkin(context.Context, secret.Value, protocol.CheckinRequest) (*protocol.CheckinResponse, error) {
	return nil, &tenancy.APIError{Op: "checkin", Err: e.err}
}

func TestTenancyCheckInCarriesTheTicksTelemetry(t *testing.T) {
	f := newFixture(t, "")
	r := f.remote()
	write(t, f.cfg().StatePath(), `{"env_id":"env-qa-02","applied_sha":"7a10aa","last_result":"applied","pending_upgrade_from":"0.1.9",
		"docker_root_dir":"`+f.dir+`/docker-root","docker_version":"29.0.1",
		"token":{"source":"lease","obtained_at":"2026-12-02T09:00:00Z","ttl_s":86400}}`, 0o600)
	want{status: OK}.assert(t, f.check("tenancy"))
	cs := r.tenancy.Checkins(envID)
	if len(cs) != 1 {
		t.Fatalf("%d check-ins, want 1", len(cs))
	}
	req := cs[0].Request
	if req.AppliedSha == nil || *req.AppliedSha != "7a10aa" || req.LastResult != "applied" || req.Hostname != "qa-02" ||
		req.Transport != "sdk" || req.DockerVersion != "29.0.1" || req.UpgradedFrom != "0.1.9" {
		t.Errorf("check-in request %+v", req)
	}
	if req.TokenTTLSec == nil || *req.TokenTTLSec != 86400-3600 {
		t.Errorf("token_ttl_s = %v, want 82800", req.TokenTTLSec)
	}
	if req.DiskFreeBytes == nil || *req.DiskFreeBytes != 50*gib {
		t.Errorf("disk_free_bytes = %v, want the tightest root", req.DiskFreeBytes)
	}
	if req.Timer == nil || req.Timer.Enabled == nil || !*req.Timer.Enabled {
		t.Errorf("timer = %+v", req.Timer)
	}
}

func TestOpenBaoCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(f *fixture, r *remote)
		want  want
	}{
		{"verified, token valid", func(*fixture, *remote) {},
			want{status: OK, detail: []string{"verified against CA", "openbao-ca.pem", "token valid for 24h0m0s", "renewable"}}},
		{"wrong CA", func(f *fixture, r *remote) {
			write(f.t, f.cfg().Bao.CAFile, selfSignedPEM(f.t), 0o644)
			f.setBao(r.bao.URL)
		}, want{status: Fail, detail: []string{"does not verify against CA"}, fix: []string{"openbao-ca.pem"}}},
		{"no CA file: the system roots do not know it", func(f *fixture, r *remote) {
			os.Remove(f.cfg().Bao.CAFile)
			f.setBao(r.bao.URL)
		}, want{status: Fail, detail: []string{"system roots"}, fix: []string{"put OpenBao's CA certificate"}}},
		{"CA file without a certificate", func(f *fixture, r *remote) {
			write(f.t, f.cfg().Bao.CAFile, "not a certificate", 0o644)
			f.setBao(r.bao.URL)
		}, want{status: Fail, detail: []string{"no PEM certificate"}, fix: []string{"openbao-ca.pem"}}},
		{"token revoked", func(_ *fixture, r *remote) { r.bao.Revoke(r.token) },
			want{status: Fail, detail: []string{"refuses the token", "expired or revoked"}, fix: []string{"re-run the install kit"}}},
		{"token expired, bootstrap grant on disk", func(f *fixture, r *remote) {
			r.bao.SetTTL(r.token, 0)
			write(f.t, f.cfg().BootstrapFile, "eyJhbGciOi.grant.sig", 0o600)
		}, want{status: Fail, fix: []string{"monky-deployd tick"}}},
		// A lease's addr minted the token: the tick looks it up there, and at bao.addr only when
		// that one does not answer; doctor does the same. 127.0.0.1:1 answers nothing.
		{"token minted by a lease's OpenBao, valid there", func(f *fixture, r *remote) {
			write(f.t, f.cfg().StatePath(), `{"token": {"source": "lease", "addr": "`+r.bao.URL+`"}}`, 0o600)
			f.cfg().Bao.Addr = "https://127.0.0.1:1"
			f.setBao(f.cfg().Bao.Addr)
		}, want{status: OK, detail: []string{"token valid for 24h0m0s there", "a lease's addr minted it", "not bao.addr https://127.0.0.1:1"}}},
		{"token minted by a lease's OpenBao, refused there", func(f *fixture, r *remote) {
			r.bao.Revoke(r.token)
			write(f.t, f.cfg().StatePath(), `{"token": {"source": "lease", "addr": "`+r.bao.URL+`"}}`, 0o600)
			f.cfg().Bao.Addr = "https://127.0.0.1:1"
			f.setBao(f.cfg().Bao.Addr)
		}, want{status: Fail, detail: []string{"that minted the token refuses it"}, fix: []string{"re-run the install kit"}}},
		{"the lease's OpenBao is gone, bao.addr knows the token", func(f *fixture, r *remote) {
			write(f.t, f.cfg().StatePath(), `{"token": {"source": "lease", "addr": "https://127.0.0.1:1"}}`, 0o600)
		}, want{status: OK, detail: []string{"token valid for 24h0m0s", "https://127.0.0.1:1 that minted the token does not answer", "the next apply records it at"}}},
		{"the lease's OpenBao is gone, bao.addr does not know the token", func(f *fixture, r *remote) {
			r.bao.Revoke(r.token)
			write(f.t, f.cfg().StatePath(), `{"token": {"source": "lease", "addr": "https://127.0.0.1:1"}}`, 0o600)
		}, want{status: Fail, detail: []string{"refuses the token", "https://127.0.0.1:1 that minted the token does not answer"}}},
		{"token minted at bao.addr", func(f *fixture, r *remote) {
			r.bao.Revoke(r.token)
			write(f.t, f.cfg().StatePath(), `{"token": {"source": "lease", "addr": "`+f.cfg().Bao.Addr+`"}}`, 0o600)
		}, want{status: Fail, detail: []string{"refuses the token"}}},
		{"token of another env", func(f *fixture, r *remote) {
			write(f.t, f.cfg().TokenPath(), r.bao.IssueToken("env-other", "jti-2"), 0o600)
		}, want{status: Fail, detail: []string{"belongs to env env-other"}}},
		{"no token yet", func(f *fixture, _ *remote) {
			os.Remove(f.cfg().TokenPath())
			write(f.t, f.cfg().BootstrapFile, "eyJhbGciOi.grant.sig", 0o600)
		}, want{status: OK, detail: []string{"verified against CA", "no token yet"}}},
		{"unreachable", func(f *fixture, r *remote) {
			r.bao.Close()
		}, want{status: Fail, detail: []string{"unreachable"}, fix: []string{"monky-host.env-qa-02"}}},
		{"unreachable, transport system", func(f *fixture, r *remote) {
			f.env.Config.Transport = config.TransportSystem
			r.bao.Close()
		}, want{status: Fail, fix: []string{"ziti-edge-tunnel", "127.0.0.1:"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "")
			r := f.remote()
			tc.setup(f, r)
			res := f.check("openbao")
			tc.want.assert(t, res)
			if strings.Contains(res.Detail+res.Fix, r.token) {
				t.Errorf("the token leaked: %+v", res)
			}
		})
	}
}

// A library that put the token into an error would still not print it: every result goes
// through the redactor that holds what doctor read.
func TestSecretsNeverPrinted(t *testing.T) {
	f := newFixture(t, "")
	r := f.remote()
	f.env.Tenancy = errTenancy{fmt.Errorf("dial with bearer %s failed", r.token)}
	res := f.check("tenancy")
	if res.Status != Fail || strings.Contains(res.Detail, r.token) || !strings.Contains(res.Detail, "***") {
		t.Errorf("result %+v", res)
	}
}

func TestEveryCheckPassesOnAHealthyBox(t *testing.T) {
	f := newFixture(t, "")
	f.remote()
	f.expectInfo()
	f.run.Expect("docker", []string{"compose", "version", "--short"}).Returns("2.40.3\n", "", 0)
	rs, allOK := Run(context.Background(), Checks(f.env))
	if !allOK {
		var b strings.Builder
		Print(&b, rs)
		t.Fatalf("not all OK:\n%s", b.String())
	}
	var names []string
	for _, r := range rs {
		names = append(names, r.Name)
	}
	if got := strings.Join(names, " "); got != "config user identity identity-group docker compose docker-config state-owner disk timer tenancy openbao refused-token hold" {
		t.Errorf("checks %s", got)
	}
}

func TestRefusedToken(t *testing.T) {
	f := newFixture(t, "")
	want{status: OK, detail: []string{"no token was refused"}}.assert(t, f.check("refused-token"))
	p := f.cfg().TokenPath() + ".superseded"
	write(t, p, "s.refused", 0o600)
	want{status: OK, detail: []string{p, "AGENT_UNAUTHENTICATED", "delete it"}}.assert(t, f.check("refused-token"))
	write(t, p, "s.refused", 0o644)
	want{status: Fail, detail: []string{"readable by others"}, fix: []string{"chmod 0600 " + p}}.assert(t, f.check("refused-token"))
}

// A hold is a WARN with how to end it; it fails nothing (doctor's exit stays 0).
func TestHoldCheck(t *testing.T) {
	f := newFixture(t, "")
	want{status: OK, detail: []string{"not held"}}.assert(t, f.check("hold"))
	now := f.env.Now()
	st := &state.State{Hold: &state.Hold{Reason: "db migration", By: "alice", Since: now.Add(-time.Hour), Until: now.Add(3 * time.Hour)}}
	if err := state.Save(f.cfg().StatePath(), st); err != nil {
		t.Fatal(err)
	}
	res := f.check("hold")
	want{status: Warn, detail: []string{"held by alice until", "db migration", "3h0m0s left"}, fix: []string{"monky-deployd unhold"}}.assert(t, res)
	if rs, allOK := Run(context.Background(), []Check{{Name: "hold", Run: func(context.Context) Result { return res }}}); !allOK || Failed(rs) != 0 {
		t.Error("a WARN failed the run")
	}
	var b strings.Builder
	if err := Print(&b, []Result{res}); err != nil || !strings.HasPrefix(b.String(), "WARN hold ") || !strings.Contains(b.String(), "— fix: monky-deployd unhold") {
		t.Errorf("printed %q", b.String())
	}
	// Over: not held any more, whatever state.json still says.
	st.Hold.Until = now.Add(-time.Minute)
	if err := state.Save(f.cfg().StatePath(), st); err != nil {
		t.Fatal(err)
	}
	f2 := newFixture(t, "")
	f2.env.Config = f.env.Config
	want{status: OK, detail: []string{"not held"}}.assert(t, f2.check("hold"))
}

func TestStateOwnerCheck(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(f *fixture, dir string)
		list  func(dir string, uid uint32) ([]state.ForeignFile, bool, error)
		want  want
	}{
		{"all the agent's", func(*fixture, string) {}, nil,
			want{status: OK, detail: []string{"belongs to monky-deployd"}}},
		{"what a root tick left", func(f *fixture, dir string) {
			write(f.t, filepath.Join(dir, "state.json"), "{}", 0o600)
			mkdir(f.t, filepath.Join(dir, "docker"), 0o700)
			write(f.t, filepath.Join(dir, "docker", "config.json"), "{}", 0o600)
			write(f.t, filepath.Join(dir, "upgraded-from"), "0.1.9\n", 0o644)
			for _, p := range []string{"state.json", "docker/config.json", "upgraded-from"} {
				f.fs.stat[filepath.Join(dir, p)] = FileInfo{Mode: 0o600}
			}
		}, nil, want{status: Fail,
			detail: []string{"2 entries under DIR do not belong to monky-deployd", "state.json (root)", "docker/config.json (root)"},
			fix:    []string{"chown -h monky-deployd: DIR/docker/config.json DIR/state.json"}}},
		{"state_dir itself root's", func(f *fixture, dir string) {
			f.fs.stat[dir] = FileInfo{Mode: fs.ModeDir | 0o700}
		}, nil, want{status: Fail, detail: []string{"1 entries under DIR", ": DIR (root)"}, fix: []string{"chown -h monky-deployd: DIR"}}},
		{"more than can be listed", func(*fixture, string) {}, func(dir string, uid uint32) ([]state.ForeignFile, bool, error) {
			return []state.ForeignFile{{Path: dir + "/a b", UID: 0}}, true, nil
		}, want{status: Fail, detail: []string{"more than 1 entries", "a b (root)"}, fix: []string{"chown -hR monky-deployd: DIR"}}},
		{"unreadable", func(*fixture, string) {}, func(string, uint32) ([]state.ForeignFile, bool, error) {
			return nil, false, fs.ErrPermission
		}, want{status: Fail, detail: []string{"cannot look at everything under DIR"}, fix: []string{"sudo monky-deployd doctor"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "")
			dir := f.cfg().StateDir
			tc.setup(f, dir)
			if tc.list != nil {
				f.env.ForeignFiles = tc.list
			}
			for _, l := range [][]string{tc.want.detail, tc.want.fix} {
				for i, s := range l {
					l[i] = strings.ReplaceAll(s, "DIR", dir)
				}
			}
			tc.want.assert(t, f.check("state-owner"))
		})
	}
}
