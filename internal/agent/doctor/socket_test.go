package doctor

import (
	"io/fs"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
)

// The docker check judges the socket for the agent's ticks: `docker info` answering (as root,
// typically) proves the engine, not the agent's access. Every case below has docker info succeed.
func TestDockerSocket(t *testing.T) {
	const otherGID = 1234
	sockInfo := func(mode fs.FileMode, uid, gid uint32) FileInfo {
		return FileInfo{Mode: fs.ModeSocket | mode, UID: uid, GID: gid}
	}
	for _, tc := range []struct {
		name  string
		setup func(f *fixture)
		want  want
	}{
		{"root:docker 0660, the agent in group docker", func(f *fixture) { f.asRoot() },
			want{status: OK, detail: []string{"as root", "socket SOCK is root:docker 0660", "monky-deployd reaches it through group docker"}}},
		{"root:docker 0660, the agent not in group docker: the unit adds nothing", func(f *fixture) {
			f.asRoot()
			f.env.Agent.GIDs = []uint32{agentGID, zitiGID}
		}, want{status: Fail, detail: []string{"monky-deployd cannot use SOCK (root:docker 0660)"}, fix: []string{"usermod -a -G docker monky-deployd"}}},
		{"root:root 0660", func(f *fixture) {
			f.asRoot()
			f.fs.stat[f.sock] = sockInfo(0o660, 0, 0)
		}, want{status: Fail, detail: []string{"docker info answered as root, but monky-deployd cannot use SOCK (root:root 0660)"},
			fix: []string{"chgrp docker SOCK && chmod 0660 SOCK", "SocketGroup=docker"}}},
		{"root:root 0660, doctor run as the agent", func(f *fixture) {
			f.fs.stat[f.sock] = sockInfo(0o660, 0, 0)
		}, want{status: Fail, detail: []string{"monky-deployd cannot use SOCK (root:root 0660)"}, fix: []string{"chgrp docker SOCK"}}},
		{"owned by another group", func(f *fixture) {
			f.asRoot()
			f.fs.stat[f.sock] = sockInfo(0o660, 0, otherGID)
		}, want{status: Fail, detail: []string{"cannot use SOCK (root:1234 0660)"}, fix: []string{"chgrp docker SOCK && chmod 0660 SOCK"}}},
		{"root:docker 0600", func(f *fixture) {
			f.asRoot()
			f.fs.stat[f.sock] = sockInfo(0o600, 0, dockerGID)
		}, want{status: Fail, detail: []string{"cannot use SOCK (root:docker 0600)"}, fix: []string{"chmod g+rw SOCK", "SocketMode=0660"}}},
		{"root:docker 0640: connecting needs write", func(f *fixture) {
			f.asRoot()
			f.fs.stat[f.sock] = sockInfo(0o640, 0, dockerGID)
		}, want{status: Fail, detail: []string{"cannot use SOCK"}, fix: []string{"chmod g+rw SOCK"}}},
		{"a laptop user outside group docker: no unit adds it", func(f *fixture) {
			f.env.Self = Account{Name: "alice", UID: 1000}
			f.env.Agent = &Account{Name: "alice", UID: 1000, GIDs: []uint32{1000}}
		}, want{status: Fail, detail: []string{"alice cannot use SOCK (root:docker 0660)"}, fix: []string{"usermod -a -G docker alice"}}},
		{"a laptop user in group docker", func(f *fixture) {
			f.env.Self = Account{Name: "alice", UID: 1000}
			f.env.Agent = &Account{Name: "alice", UID: 1000, GIDs: []uint32{1000, dockerGID}}
		}, want{status: OK, detail: []string{"alice reaches it through group docker"}}},
		{"world-writable", func(f *fixture) {
			f.asRoot()
			f.fs.stat[f.sock] = sockInfo(0o666, 0, 0)
		}, want{status: OK, detail: []string{"through its bits for others"}}},
		{"the agent owns it (rootless engine)", func(f *fixture) {
			f.fs.stat[f.sock] = sockInfo(0o600, agentUID, agentGID)
		}, want{status: OK, detail: []string{"as its owner"}}},
		{"an ACL grants it, and the line says it will not last", func(f *fixture) {
			f.asRoot()
			f.fs.stat[f.sock] = FileInfo{Mode: fs.ModeSocket | 0o660, ACL: true}
			f.fs.aclGrants[f.sock] = true
		}, want{status: OK, detail: []string{"only an ACL grants it", "vanishes when dockerd (or docker.socket) recreates it"}}},
		{"an ACL for someone else grants the agent nothing", func(f *fixture) {
			f.asRoot()
			f.fs.stat[f.sock] = FileInfo{Mode: fs.ModeSocket | 0o660, ACL: true}
		}, want{status: Fail, detail: []string{"monky-deployd cannot use SOCK (root:root 0660 +acl)"}, fix: []string{"chgrp docker SOCK"}}},
		{"a directory that is not searchable", func(f *fixture) {
			f.asRoot()
			dir := filepath.Join(f.dir, "run")
			f.sock = filepath.Join(dir, "docker.sock")
			f.fs.stat[dir] = FileInfo{Mode: fs.ModeDir | 0o700}
			f.fs.stat[f.sock] = sockInfo(0o660, 0, dockerGID)
		}, want{status: Fail, detail: []string{"cannot enter"}, fix: []string{"chmod o+x"}}},
		{"no socket", func(f *fixture) {
			f.asRoot()
			delete(f.fs.stat, f.sock)
		}, want{status: Fail, detail: []string{"the socket SOCK, where the agent's docker connects, does not exist"}, fix: []string{"systemctl enable --now docker.socket"}}},
		{"a directory where the socket should be", func(f *fixture) {
			f.asRoot()
			f.fs.stat[f.sock] = FileInfo{Mode: fs.ModeDir | 0o755}
		}, want{status: Fail, detail: []string{"SOCK is not a socket (a directory root:root 0755)"}, fix: []string{"rm -r SOCK"}}},
		{"the default socket", func(f *fixture) {
			f.asRoot()
			f.defaultSocket(0o660)
		}, want{status: Fail, detail: []string{"cannot use /var/run/docker.sock (root:root 0660)"}, fix: []string{"chgrp docker /var/run/docker.sock"}}},
		{"unix:// alone is the default socket, as for docker", func(f *fixture) {
			f.asRoot()
			f.defaultSocket(0o660)
			f.endpoint = "unix://"
		}, want{status: Fail, detail: []string{"cannot use /var/run/docker.sock (root:root 0660)"}}},
		// doctor's own DOCKER_HOST names another endpoint than the ticks': what the ticks use is
		// judged, never the other one (review fd-1).
		{"doctor's DOCKER_HOST is tcp, the ticks' socket is root:root 0600", func(f *fixture) {
			f.asRoot()
			f.defaultSocket(0o600)
			f.env.DockerHost = "tcp://10.0.0.5:2376"
		}, want{status: Fail, detail: []string{"monky-deployd cannot use /var/run/docker.sock (root:root 0600)"}}},
		{"doctor's DOCKER_HOST is ssh, the ticks' socket is fine: a note", func(f *fixture) {
			f.asRoot()
			f.env.DockerHost = "ssh://deploy:hunter2@build-01"
		}, want{status: OK, detail: []string{"doctor's DOCKER_HOST (ssh://deploy:xxxxx@build-01) was set aside", "ticks connect to unix://SOCK", "reaches it through group docker"}}},
		{"doctor's DOCKER_HOST is a world-writable socket the ticks never use", func(f *fixture) {
			f.asRoot()
			f.defaultSocket(0o600)
			f.fs.stat["/run"] = FileInfo{Mode: fs.ModeDir | 0o755}
			f.fs.stat["/run/user"] = FileInfo{Mode: fs.ModeDir | 0o755}
			f.fs.stat["/run/user/1000"] = FileInfo{Mode: fs.ModeDir | 0o755}
			f.fs.stat["/run/user/1000/docker.sock"] = FileInfo{Mode: fs.ModeSocket | 0o666, UID: 1000, GID: 1000}
			f.env.DockerHost = "unix:///run/user/1000/docker.sock"
		}, want{status: Fail, detail: []string{"cannot use /var/run/docker.sock (root:root 0600)"}}},
		{"doctor's DOCKER_HOST names the ticks' socket: no note", func(f *fixture) {
			f.asRoot()
			f.env.DockerHost = "unix://" + f.sock
		}, want{status: OK, detail: []string{"reaches it through group docker"}, notDetail: []string{"set aside"}}},
		{"the agent's docker context is tcp: not judged by modes, and said so", func(f *fixture) {
			f.asRoot()
			f.endpoint = "tcp://10.0.0.5:2376"
			delete(f.fs.stat, f.sock) // no socket file is looked at
		}, want{status: OK, detail: []string{"the agent's docker connects to tcp://10.0.0.5:2376, a tcp endpoint", "cannot be judged by file modes", "docker info answered there as root", "run doctor as monky-deployd"}}},
		{"the agent's docker context is ssh", func(f *fixture) {
			f.asRoot()
			f.endpoint = "ssh://deploy@build-01"
		}, want{status: OK, detail: []string{"ssh://deploy@build-01, a ssh endpoint"}}},
		{"the agent's current context does not exist", func(f *fixture) {
			f.asRoot()
			f.endpointRes = &runner.Result{Stderr: []byte("context \"gone\": context not found\n"), ExitCode: 1}
		}, want{status: Fail, detail: []string{"cannot say which engine it connects to", "context not found"}, fix: []string{"currentContext", "config.json"}}},
		{"the agent's endpoint is a relative unix path", func(f *fixture) {
			f.asRoot()
			f.endpoint = "unix://docker.sock"
		}, want{status: Fail, detail: []string{`the agent's docker endpoint (docker context inspect) "unix://docker.sock"`, "absolute path"}, fix: []string{"currentContext"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "")
			f.expectInfo()
			tc.setup(f)
			for _, l := range [][]string{tc.want.detail, tc.want.fix} {
				for i, s := range l {
					l[i] = strings.ReplaceAll(s, "SOCK", f.sock)
				}
			}
			r := f.check("docker")
			tc.want.assert(t, r)
			for _, n := range tc.want.notDetail {
				if strings.Contains(r.Detail, n) {
					t.Errorf("detail %q has %q", r.Detail, n)
				}
			}
			if strings.Contains(r.Detail+r.Fix, "hunter2") {
				t.Errorf("a password was printed: %+v", r)
			}
			own := 0
			for _, call := range f.run.Calls() {
				if call.Name != f.cfg().DockerBin {
					continue // setpriv and test try the access; they run no docker
				}
				if v, _ := call.Getenv("DOCKER_HOST"); v != "" && v == f.env.DockerHost && slices.Equal(call.Args, contextInspectArgs) && own == 0 {
					own++ // the one inspect that resolves doctor's own DOCKER_HOST for the note
					continue
				}
				if v, ok := call.Getenv("DOCKER_HOST"); !ok || v != "" {
					t.Errorf("%s ran with DOCKER_HOST=%q (set: %t): not as a tick", call.Cmd, v, ok)
				}
			}
		})
	}
}

// defaultSocket makes the ticks' endpoint the engine's default socket, root:root with mode.
func (f *fixture) defaultSocket(mode fs.FileMode) {
	f.sock = "/var/run/docker.sock"
	f.fs.stat["/var"] = FileInfo{Mode: fs.ModeDir | 0o755}
	f.fs.stat["/var/run"] = FileInfo{Mode: fs.ModeDir | 0o755}
	f.fs.stat[f.sock] = FileInfo{Mode: fs.ModeSocket | mode}
}

func TestParseDockerHost(t *testing.T) {
	for _, tc := range []struct {
		in             string
		socket, scheme string
		shown          string
		bad            string
	}{
		{"", "/var/run/docker.sock", "unix", "unix:///var/run/docker.sock", ""},
		{"unix:///run/user/1000/docker.sock", "/run/user/1000/docker.sock", "unix", "unix:///run/user/1000/docker.sock", ""},
		{"unix:///run//docker.sock/", "/run/docker.sock", "unix", "unix:///run/docker.sock", ""},
		// As docker's opts.ParseHost: an empty unix path is the default socket.
		{"unix://", "/var/run/docker.sock", "unix", "unix:///var/run/docker.sock", ""},
		{"tcp://127.0.0.1:2375", "", "tcp", "tcp://127.0.0.1:2375", ""},
		{"127.0.0.1:2375", "", "tcp", "127.0.0.1:2375", ""},
		{"ssh://u:hunter2@host", "", "ssh", "ssh://u:xxxxx@host", ""},
		{"fd://", "", "fd", "fd://", ""},
		{"npipe:////./pipe/docker_engine", "", "npipe", "npipe:////./pipe/docker_engine", ""},
		{"unix://run/docker.sock", "", "", "", "absolute path"},
		{"UNIX:///x.sock", "", "", "", `scheme "UNIX"`},
		{"http://u:hunter2@h", "", "", "", `"http://u:xxxxx@h"`},
		{"tcp://u:hunter2@[::1", "", "", "", `"tcp://…"`},
	} {
		ep, err := parseDockerHost("FIELD", tc.in)
		if tc.bad != "" {
			if err == nil || !strings.Contains(err.Error(), "FIELD") || !strings.Contains(err.Error(), tc.bad) || strings.Contains(err.Error(), "hunter2") {
				t.Errorf("parseDockerHost(%q) = %+v, %v; want an error naming FIELD with %q and no password", tc.in, ep, err, tc.bad)
			}
			continue
		}
		if err != nil || ep.Socket != tc.socket || ep.Scheme != tc.scheme || ep.Shown != tc.shown {
			t.Errorf("parseDockerHost(%q) = %+v, %v", tc.in, ep, err)
		}
	}
}

func FuzzParseDockerHost(f *testing.F) {
	for _, s := range []string{"", "unix:///var/run/docker.sock", "tcp://h:2376", "unix://", "h:1", "ssh://u:p@h", "unix://../x", "fd://", "UNIX:///x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		ep, err := parseDockerHost("DOCKER_HOST", host)
		if err != nil {
			if !strings.Contains(err.Error(), "DOCKER_HOST") {
				t.Errorf("parseDockerHost(%q): %v does not name the field", host, err)
			}
			return
		}
		if ep.Socket != "" && (!filepath.IsAbs(ep.Socket) || filepath.Clean(ep.Socket) != ep.Socket) {
			t.Errorf("parseDockerHost(%q): socket %q is not a clean absolute path", host, ep.Socket)
		}
		if (ep.Socket == "") == (ep.Scheme == "unix") {
			t.Errorf("parseDockerHost(%q) = %+v: a socket path only for unix", host, ep)
		}
	})
}
