//go:build integration

package cli_test

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao/baotest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy/tenancytest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/grant"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/itest"
)

// These tests run the real binary as root and as another real uid, and on a real full
// filesystem: they need root (to create users, change owners and mount a tmpfs).

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		itest.Unavailable(t, "these tests need root (users, owners, mounts)")
	}
}

// openDirs makes dir and its parents up to the temp root traversable by any user: t.TempDir
// makes them 0700 for root, and the agent's account must reach its binary and config.
func openDirs(t *testing.T, dir string) {
	t.Helper()
	for d := dir; d != os.TempDir() && d != "/" && d != "."; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// throwawayAccount creates a system user with a group of its own and membership of one more
// group (a stand-in for docker), and removes both at the end.
func throwawayAccount(t *testing.T) (u *user.User, extraGID uint32) {
	t.Helper()
	var b [4]byte
	rand.Read(b[:])
	name := "i11b-agent-" + hex.EncodeToString(b[:])
	group := "i11b-dock-" + hex.EncodeToString(b[:])
	run := func(cmd string, args ...string) {
		t.Helper()
		if out, err := exec.Command(cmd, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", cmd, args, err, out)
		}
	}
	run("groupadd", "--system", group)
	t.Cleanup(func() { exec.Command("groupdel", group).Run() })
	run("useradd", "--system", "--user-group", "--no-create-home", "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin", "--groups", group, name)
	t.Cleanup(func() { exec.Command("userdel", name).Run() })
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	g, err := user.LookupGroup(group)
	if err != nil {
		t.Fatal(err)
	}
	gid, _ := strconv.ParseUint(g.Gid, 10, 32)
	return u, uint32(gid)
}

// freeUID returns a uid no account of this machine has, from 4242 up.
func freeUID(t *testing.T) int {
	t.Helper()
	for uid := 4242; uid < 60000; uid++ {
		_, err := user.LookupId(strconv.Itoa(uid))
		var unknown user.UnknownUserIdError
		if errors.As(err, &unknown) {
			return uid
		}
		if err != nil {
			t.Fatalf("looking up uid %d: %v", uid, err)
		}
	}
	t.Fatal("no free uid between 4242 and 60000")
	return 0
}

func chownTree(t *testing.T, dir string, uid, gid int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// runAs runs the binary as cred (nil: as the test, root) and returns its exit code and stderr.
func runAs(t *testing.T, cred *syscall.Credential, bin string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, stderr.String()
	case errors.As(err, &ee):
		return ee.ExitCode(), stderr.String()
	default:
		t.Fatalf("%s %v: %v", bin, args, err)
		return -1, ""
	}
}

func ownerOf(t *testing.T, p string) uint32 {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Uid
}

// TestSudoTickRunsAsTheOwnerOfStateDir: `sudo monky-deployd tick` on a box whose state_dir
// belongs to the agent's account runs the tick as that account, with its groups, and leaves no
// file the agent cannot replace; an owner without an account is refused with exit 78 and the
// exact sudo line, touching nothing; and the agent's own tick, finding a root-owned state.json
// (what a root tick of an older agent left), checks in and reports which file and the chown.
func TestSudoTickRunsAsTheOwnerOfStateDir(t *testing.T) {
	needRoot(t)
	u, dockGID := throwawayAccount(t)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir := t.TempDir()
	agentBin, fakeDocker := buildBinaries(t, filepath.Join(dir, "bin"))
	// docker_bin records the groups the tick's docker calls run with.
	seen := filepath.Join(dir, "seen")
	if err := os.Mkdir(seen, 0o777); err != nil {
		t.Fatal(err)
	}
	os.Chmod(seen, 0o777)
	wrapper := filepath.Join(dir, "bin", "docker-wrapper")
	script := fmt.Sprintf("#!/bin/sh\nid -u >%s/uid; id -G >%s/groups\nexec %s \"$@\"\n", seen, seen, fakeDocker)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	box := filepath.Join(dir, "box")
	cfgPath, ts, cleanup := convergedBoxWithTenancy(t, box, wrapper)
	defer cleanup()
	stateDir := filepath.Join(box, "state")
	if err := os.Chmod(cfgPath, 0o644); err != nil {
		t.Fatal(err)
	}
	openDirs(t, filepath.Join(dir, "bin"))
	openDirs(t, box)
	chownTree(t, stateDir, uid, gid)

	code, stderr := runAs(t, nil, agentBin, "--config", cfgPath, "tick")
	if code != 0 || !strings.Contains(stderr, "re-running as the owner of state_dir") || !strings.Contains(stderr, "user="+u.Username) {
		t.Fatalf("sudo tick: exit %d, stderr:\n%s", code, stderr)
	}
	if foreign, _, err := state.ForeignFiles(stateDir, uint32(uid)); err != nil || len(foreign) != 0 {
		t.Errorf("after a sudo tick, files the agent does not own: %v (%v)", foreign, err)
	}
	if got := ownerOf(t, filepath.Join(stateDir, "state.json")); got != uint32(uid) {
		t.Errorf("state.json belongs to uid %d, want the agent's %d", got, uid)
	}
	if b, _ := os.ReadFile(filepath.Join(seen, "uid")); strings.TrimSpace(string(b)) != u.Uid {
		t.Errorf("docker ran as uid %q, want %s", b, u.Uid)
	}
	if b, _ := os.ReadFile(filepath.Join(seen, "groups")); !strings.Contains(" "+strings.TrimSpace(string(b))+" ", fmt.Sprintf(" %d ", dockGID)) {
		t.Errorf("docker ran with groups %q, want the account's group %d among them", b, dockGID)
	}

	t.Run("the agent's tick names a root-owned state.json", func(t *testing.T) {
		sp := filepath.Join(stateDir, "state.json")
		if err := os.Chown(sp, 0, 0); err != nil {
			t.Fatal(err)
		}
		defer os.Chown(sp, uid, gid)
		before := len(ts.Checkins(benchEnv))
		cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{dockGID}}
		code, stderr := runAs(t, cred, agentBin, "--config", cfgPath, "tick")
		if code != 1 || !strings.Contains(stderr, "state.json (uid 0)") || !strings.Contains(stderr, "sudo chown -hR "+u.Username+":"+u.Username+" "+stateDir) {
			t.Errorf("agent tick: exit %d, stderr:\n%s", code, stderr)
		}
		if n := len(ts.Checkins(benchEnv)); n != before+1 {
			t.Errorf("check-ins %d → %d: the box went silent", before, n)
		}
		r, ok := ts.LastReport(benchEnv)
		if !ok || r.Result != "failed" || !strings.Contains(r.Detail, "state.json (uid 0)") || !strings.Contains(r.Detail, "chown") {
			t.Errorf("report = %+v, want failed naming state.json and the chown", r)
		}
		if got := ownerOf(t, sp); got != 0 {
			t.Errorf("the agent's tick changed state.json's owner to %d; it repairs nothing", got)
		}
	})

	t.Run("an owner without an account is refused", func(t *testing.T) {
		stray := freeUID(t)
		chownTree(t, stateDir, stray, stray)
		defer chownTree(t, stateDir, uid, gid)
		sp := filepath.Join(stateDir, "state.json")
		before, _ := os.ReadFile(sp)
		code, stderr := runAs(t, nil, agentBin, "--config", cfgPath, "tick")
		want := fmt.Sprintf("sudo -u '#%d' monky-deployd --config %s tick", stray, cfgPath)
		if code != 78 || !strings.Contains(stderr, want) {
			t.Errorf("exit %d, stderr:\n%s\nwant 78 and %q", code, stderr, want)
		}
		after, _ := os.ReadFile(sp)
		if !bytes.Equal(before, after) || ownerOf(t, sp) != uint32(stray) {
			t.Error("a refused tick changed state.json")
		}
	})
}

// TestFullDiskStillReports: with state_dir on a full filesystem (a 2 MiB tmpfs, filled), the
// real binary's tick still checks in and reports, naming the write error, and exits 1; once
// space is back, the next tick removes the temp files a killed tick left and is whole again.
func TestFullDiskStillReports(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	agentBin, fakeDocker := buildBinaries(t, filepath.Join(dir, "bin"))
	box := smallTmpfs(t, dir, "2m")
	cfgPath, ts, cleanup := convergedBoxWithTenancy(t, box, fakeDocker)
	defer cleanup()
	stateDir := filepath.Join(box, "state")
	if code, stderr := runAs(t, nil, agentBin, "--config", cfgPath, "tick"); code != 0 {
		t.Fatalf("first tick: exit %d\n%s", code, stderr)
	}

	fillDisk(t, box)
	stBefore, _ := os.ReadFile(filepath.Join(stateDir, "state.json"))
	reports := len(ts.Reports(benchEnv))

	code, stderr := runAs(t, nil, agentBin, "--config", cfgPath, "tick")
	if code != 1 || !strings.Contains(stderr, "state.json not saved; the report went out") || !strings.Contains(stderr, "no space left on device") {
		t.Errorf("tick on a full disk: exit %d, stderr:\n%s\nwant exit 1 naming the write error", code, stderr)
	}
	if n := len(ts.Reports(benchEnv)); n != reports+1 {
		t.Fatalf("reports %d → %d: the box went silent on a full disk", reports, n)
	}
	r, _ := ts.LastReport(benchEnv)
	if r.Result != "healthy" || !strings.Contains(r.Detail, "state.json not saved") || !strings.Contains(r.Detail, "no space left on device") {
		t.Errorf("report on a full disk = %s %q, want healthy naming the write error", r.Result, r.Detail)
	}
	if after, _ := os.ReadFile(filepath.Join(stateDir, "state.json")); !bytes.Equal(stBefore, after) {
		t.Error("state.json changed although no write could succeed")
	}

	// Space is back; a kill had left temp files of atomic writes.
	if err := os.Remove(filepath.Join(box, "filler")); err != nil {
		t.Fatal(err)
	}
	leftovers := []string{".state.json.tmp-0123456789abcdef", ".bao.token.tmp-fedcba9876543210"}
	for _, n := range leftovers {
		if err := os.WriteFile(filepath.Join(stateDir, n), []byte("s.half-written\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	code, stderr = runAs(t, nil, agentBin, "--config", cfgPath, "tick")
	if code != 0 || !strings.Contains(stderr, "removed temp files a killed tick left") {
		t.Errorf("tick after the disk was freed: exit %d, stderr:\n%s", code, stderr)
	}
	for _, n := range leftovers {
		if _, err := os.Lstat(filepath.Join(stateDir, n)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s survived the tick: %v", n, err)
		}
	}
	if r, _ := ts.LastReport(benchEnv); r.Result != "healthy" || r.Detail != "" {
		t.Errorf("report after recovery = %s %q", r.Result, r.Detail)
	}
	st, err := state.Load(filepath.Join(stateDir, "state.json"))
	if err != nil || st.LastCheckinAt == nil || st.LastResult != "healthy" {
		t.Errorf("state after recovery = %+v, %v", st, err)
	}
}

// smallTmpfs mounts a tmpfs of size bytes at a new directory under dir, unmounted at the end.
func smallTmpfs(t *testing.T, dir, size string) string {
	t.Helper()
	box := filepath.Join(dir, "box")
	if err := os.Mkdir(box, 0o700); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size+",mode=0700", "i19-full", box).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v\n%s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", box).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v\n%s", box, err, out)
		}
	})
	return box
}

// fillDisk fills the filesystem of dir to the last byte with dir/filler.
func fillDisk(t *testing.T, dir string) {
	t.Helper()
	filler, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	chunk := make([]byte, 4096)
	for {
		if _, err := filler.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	filler.Close()
	for _, small := range []int{512, 1} {
		f, _ := os.OpenFile(filepath.Join(dir, "filler"), os.O_WRONLY|os.O_APPEND, 0)
		for f != nil {
			if _, err := f.Write(chunk[:small]); err != nil {
				break
			}
		}
		f.Close()
	}
}

// TestFullDiskKeepsTheBackoff: with state_dir on a full filesystem (a small tmpfs, filled), a
// release that fails enters its backoff, and the next tick honours it: it fetches, judges and
// tries nothing before the next try is due. The backoff lives in state.json's reserve, which a
// save the disk refuses is written into in place; once space is back, state.json catches up.
func TestFullDiskKeepsTheBackoff(t *testing.T) {
	needRoot(t)
	dir := t.TempDir()
	agentBin, fakeDocker := buildBinaries(t, filepath.Join(dir, "bin"))
	box := smallTmpfs(t, dir, "4m")
	cfgPath, ts, cleanup := convergedBoxWithTenancy(t, box, fakeDocker)
	defer cleanup()
	stateDir := filepath.Join(box, "state")
	if code, stderr := runAs(t, nil, agentBin, "--config", cfgPath, "tick"); code != 0 {
		t.Fatalf("first tick: exit %d\n%s", code, stderr)
	}
	if _, err := os.Stat(filepath.Join(stateDir, "state.json.reserve")); err != nil {
		t.Fatalf("no reserve after a tick: %v", err)
	}
	failing := ts.SetDesired(benchEnv, map[string]string{
		"bundle.json":        `{"compose_file": "docker-compose.yml"}`,
		"docker-compose.yml": "services:\n  api:\n    image: x/api:2\n  worker:\n    image: x/worker:2\n",
	})
	fillDisk(t, box)

	code, stderr := runAs(t, nil, agentBin, "--config", cfgPath, "tick")
	if code != 1 || !strings.Contains(stderr, "backoff: "+failing[:12]+" failed 1×") {
		t.Fatalf("the failing tick on a full disk: exit %d, stderr:\n%s", code, stderr)
	}
	if !strings.Contains(stderr, "kept in the reserve") {
		t.Errorf("the failing tick does not say the state went to the reserve:\n%s", stderr)
	}
	fetched := len(ts.BundleFetches(benchEnv))
	if fetched != 1 {
		t.Fatalf("%d bundle fetches, want 1", fetched)
	}
	for i := range 2 {
		code, stderr = runAs(t, nil, agentBin, "--config", cfgPath, "tick")
		if code != 1 || !strings.Contains(stderr, "WARN backoff: "+failing[:12]+" failed 1×") || !strings.Contains(stderr, "state.json is behind") {
			t.Errorf("tick %d during the backoff: exit %d, stderr:\n%s", i+2, code, stderr)
		}
		if n := len(ts.BundleFetches(benchEnv)); n != fetched {
			t.Fatalf("tick %d fetched the failing release again (%d fetches): the backoff was lost to the full disk", i+2, n)
		}
	}
	r, _ := ts.LastReport(benchEnv)
	if r.Result != "healthy" || !strings.Contains(r.Detail, "backs off") && !strings.Contains(r.Detail, "next try at") {
		t.Errorf("report during the backoff = %s %q", r.Result, r.Detail)
	}

	// Space is back: the next save reaches state.json, with the backoff.
	if err := os.Remove(filepath.Join(box, "filler")); err != nil {
		t.Fatal(err)
	}
	runAs(t, nil, agentBin, "--config", cfgPath, "tick")
	raw, _ := os.ReadFile(filepath.Join(stateDir, "state.json"))
	if !strings.Contains(string(raw), `"deploy_backoff"`) || !strings.Contains(string(raw), failing) {
		t.Errorf("state.json after the disk was freed holds no backoff of %s:\n%s", failing[:12], raw)
	}
	if st, err := state.Load(filepath.Join(stateDir, "state.json")); err != nil || st.FromReserve() {
		t.Errorf("state after recovery read from the reserve (%v)", err)
	}
}

// TestLeaseBackoffFarAheadThroughTheBinary: state.json as a clock five years ahead (or a hand
// edit) left it, with lease_backoff.until years away. The real binary, asked to apply a release
// with secrets while its token is the install kit's (an apply swaps it for a lease), lapses that
// back-off with a warning and leases; held, it stopped every lease until the token ran out into
// "re-run the install kit". A back-off within the hour a refused login starts still holds.
func TestLeaseBackoffFarAheadThroughTheBinary(t *testing.T) {
	dir := t.TempDir()
	agentBin, fakeDocker := buildBinaries(t, filepath.Join(dir, "bin"))
	for i, tc := range []struct {
		name   string
		ahead  time.Duration
		lapsed bool
	}{
		{"five years ahead", 5 * 365 * 24 * time.Hour, true},
		{"half an hour ahead", 30 * time.Minute, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			box := filepath.Join(dir, fmt.Sprintf("box%d", i))
			if err := os.Mkdir(box, 0o700); err != nil {
				t.Fatal(err)
			}
			cfgPath, ts, bs, cleanup := convergedBoxWithServers(t, box, fakeDocker)
			defer cleanup()
			sp := filepath.Join(box, "state", "state.json")
			st, err := state.Load(sp)
			if err != nil {
				t.Fatal(err)
			}
			st.Token.Source = state.SourceBootstrap
			if err := state.Save(sp, st); err != nil {
				t.Fatal(err)
			}
			raw, err := os.ReadFile(sp)
			if err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := json.Unmarshal(raw, &doc); err != nil {
				t.Fatal(err)
			}
			until := time.Now().Add(tc.ahead).UTC().Format(time.RFC3339)
			doc["lease_backoff"] = map[string]any{"until": until, "reason": "bao: login: HTTP 400: role not found"}
			if raw, err = json.Marshal(doc); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(sp, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			bs.Put(benchEnv, "db_password", "value", "s3cr3t-db-p4ss")
			ts.SetDesired(benchEnv, map[string]string{
				"bundle.json":        `{"compose_file": "docker-compose.yml"}`,
				"docker-compose.yml": "services:\n  api:\n    image: x/api:2\n    env_file: .env\n",
				".env.template":      "DB_PASSWORD=${DB_PASSWORD}\n",
				"manifest.json":      `{"entries": [{"var": "DB_PASSWORD", "path": "db_password", "key": "value"}]}`,
			})

			_, stderr := runAs(t, nil, agentBin, "--config", cfgPath, "tick")
			leases := ts.LeasesGranted(benchEnv)
			after, err := state.Load(sp)
			if err != nil {
				t.Fatal(err)
			}
			if !tc.lapsed {
				if leases != 0 || !strings.Contains(stderr, "no new lease while OpenBao refuses lease logins") || after.LeaseBackoff == nil {
					t.Errorf("a back-off within the hour: %d leases, back-off %+v, stderr:\n%s", leases, after.LeaseBackoff, stderr)
				}
				return
			}
			if !strings.Contains(stderr, "WARN lease back-off ends further ahead than any back-off the agent starts") || !strings.Contains(stderr, "until="+until) {
				t.Errorf("no warning that the back-off was lapsed; stderr:\n%s", stderr)
			}
			if leases != 1 || after.LeaseBackoff != nil || strings.Contains(stderr, "no new lease") {
				t.Errorf("%d leases, back-off %+v after the tick, want one lease and no back-off; stderr:\n%s", leases, after.LeaseBackoff, stderr)
			}
		})
	}
}

// TestTickWithoutTheDockerGroupChecksInAndReports: the real binary, run as an account outside
// group docker (a box where docker came after the agent, now that the unit adds no group of its
// own) with the real docker CLI, checks in and reports that docker is not usable and how to fix
// it, with nothing deployed yet. It never reaches the engine (the socket refuses the account).
func TestTickWithoutTheDockerGroupChecksInAndReports(t *testing.T) {
	needRoot(t)
	dockerCLI, err := exec.LookPath("docker")
	if err != nil {
		itest.Unavailable(t, "no docker CLI")
	}
	u, _ := throwawayAccount(t)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir := t.TempDir()
	agentBin, _ := buildBinaries(t, filepath.Join(dir, "bin"))
	signer, err := grant.NewSigner("i11b")
	if err != nil {
		t.Fatal(err)
	}
	bs := baotest.Start(baotest.Options{PublicKey: signer.PublicKey()})
	defer bs.Close()
	ts := tenancytest.Start(tenancytest.Options{Verifier: bs, Signer: signer, BaoAddr: bs.URL})
	defer ts.Close()
	const env = "env-nodock-01"
	ts.AddEnv(env)
	stateDir := filepath.Join(dir, "state")
	if err := os.Mkdir(stateDir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stateDir, "bao.token"), []byte(bs.IssueToken(env, "jti-nodock")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	chownTree(t, stateDir, uid, gid)
	cfgPath := filepath.Join(dir, "config.yaml")
	cfg := fmt.Sprintf("env_id: %s\nsite: qa\ntransport: system\ntenancy:\n  base_url: %s\nbao:\n  addr: %s\nstate_dir: %s\nbootstrap_file: %s\ndocker_bin: %s\n",
		env, ts.URL, bs.URL, stateDir, filepath.Join(dir, "bootstrap.jwt"), dockerCLI)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	openDirs(t, filepath.Join(dir, "bin"))

	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{uint32(gid)}}
	code, stderr := runAs(t, cred, agentBin, "--config", cfgPath, "tick")
	if code != 0 || !strings.Contains(stderr, "docker is not usable") {
		t.Errorf("tick outside group docker: exit %d, stderr:\n%s", code, stderr)
	}
	if n := len(ts.Checkins(env)); n != 1 {
		t.Errorf("%d check-ins, want 1", n)
	}
	r, ok := ts.LastReport(env)
	if !ok || r.Result != "unhealthy" || !strings.Contains(r.Detail, "docker is not usable") || !strings.Contains(r.Detail, "permission denied") ||
		!strings.Contains(r.Detail, "usermod -a -G docker") {
		t.Errorf("report = %+v, want unhealthy naming docker, the socket's refusal and the usermod", r)
	}
}

// TestRootTickNeverCreatesAsRoot: `sudo monky-deployd tick` on a box whose state_dir is missing,
// empty and root's, or an unknown uid's, leaves nothing under state_dir that the agent's
// account (agent_user) does not own. The first two run the tick as the agent: it bootstraps,
// checks in and tries the desired release, so a root tick would have made the lock, bao.token,
// state.json and the release directory root's. The third is refused with exit 78.
func TestRootTickNeverCreatesAsRoot(t *testing.T) {
	needRoot(t)
	u, dockGID := throwawayAccount(t)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir := t.TempDir()
	agentBin, fakeDocker := buildBinaries(t, filepath.Join(dir, "bin"))
	openDirs(t, filepath.Join(dir, "bin"))
	signer, err := grant.NewSigner("i19")
	if err != nil {
		t.Fatal(err)
	}
	bs := baotest.Start(baotest.Options{PublicKey: signer.PublicKey()})
	defer bs.Close()
	ts := tenancytest.Start(tenancytest.Options{Verifier: bs, Signer: signer, BaoAddr: bs.URL})
	defer ts.Close()

	for i, tc := range []struct {
		name    string
		prepare func(stateDir string)
		code    int
	}{
		{"a missing state_dir", func(string) {}, 1},
		{"an empty state_dir of root's", func(s string) {
			if err := os.Mkdir(s, 0o700); err != nil {
				t.Fatal(err)
			}
		}, 1},
		{"a state_dir of a uid without an account", func(s string) {
			if err := os.Mkdir(s, 0o700); err != nil {
				t.Fatal(err)
			}
			os.Chown(s, 4243, 4243)
		}, 78},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := fmt.Sprintf("env-rootless-%02d", i)
			ts.AddEnv(env)
			ts.SetDesired(env, map[string]string{
				"bundle.json":        `{"compose_file": "docker-compose.yml"}`,
				"docker-compose.yml": "services:\n  api:\n    image: x/api:1\n",
			})
			box := filepath.Join(dir, env)
			kit := filepath.Join(box, "kit")
			for _, d := range []string{box, kit} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(kit, "bootstrap.jwt"), []byte(ts.RevealKit(env)+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			chownTree(t, kit, uid, gid)
			openDirs(t, box)
			stateDir := filepath.Join(box, "state")
			tc.prepare(stateDir)
			ps := filepath.Join(box, "ps.json")
			os.WriteFile(ps, nil, 0o644)
			cfgPath := filepath.Join(box, "config.yaml")
			cfg := fmt.Sprintf("env_id: %s\nsite: qa\ntransport: system\ntenancy:\n  base_url: %s\nbao:\n  addr: %s\nstate_dir: %s\nbootstrap_file: %s\ndocker_bin: %s\ntextfile_dir: %s\nagent_user: %s\n",
				env, ts.URL, bs.URL, stateDir, filepath.Join(kit, "bootstrap.jwt"), fakeDockerWith(t, box, fakeDocker, ps), filepath.Join(box, "no-node-exporter"), u.Username)
			if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}

			code, stderr := runAs(t, nil, agentBin, "--config", cfgPath, "tick")
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr)
			}
			var rootOwned []string
			filepath.WalkDir(stateDir, func(p string, _ fs.DirEntry, err error) error {
				if err == nil && ownerOf(t, p) == 0 {
					rootOwned = append(rootOwned, p)
				}
				return err
			})
			if len(rootOwned) > 0 {
				t.Errorf("root owns %q after the tick; stderr:\n%s", rootOwned, stderr)
			}
			if tc.code == 78 {
				if !strings.Contains(stderr, "sudo -u '#4243' monky-deployd --config "+cfgPath+" tick") {
					t.Errorf("stderr:\n%s\nwant the sudo line", stderr)
				}
				if names, _ := os.ReadDir(stateDir); len(names) != 0 {
					t.Errorf("a refused tick left %v", names)
				}
				return
			}
			if !strings.Contains(stderr, "re-running as it, with its groups") || !strings.Contains(stderr, "user="+u.Username) {
				t.Errorf("stderr does not say the tick re-ran as the agent:\n%s", stderr)
			}
			if ownerOf(t, stateDir) != uint32(uid) {
				t.Errorf("state_dir belongs to %d, want the agent's %d", ownerOf(t, stateDir), uid)
			}
			for _, f := range []string{"lock", "bao.token", "state.json", env} {
				if _, err := os.Lstat(filepath.Join(stateDir, f)); err != nil {
					t.Errorf("the agent's tick made no %s (%v): it did not run far", f, err)
				}
			}
			if len(ts.Checkins(env)) != 1 {
				t.Errorf("%d check-ins, want 1", len(ts.Checkins(env)))
			}
			// and the timer's tick, as the agent, goes on from there
			cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{dockGID}}
			if code, stderr := runAs(t, cred, agentBin, "--config", cfgPath, "tick"); code != 1 || strings.Contains(stderr, "permission denied") || !strings.Contains(stderr, "backoff: ") {
				t.Errorf("the agent's own tick after: exit %d\n%s", code, stderr)
			}
		})
	}
}

// TestSudoHoldRunsAsTheAgent: `sudo monky-deployd hold` on a box whose state_dir is the agent's
// re-runs as the agent (state.json stays the agent's), records who asked (sudo's caller, whom
// the re-run no longer sees); the next tick, as root too, checks in with the hold and reports
// it; `sudo monky-deployd unhold` ends it, again as the agent.
func TestSudoHoldRunsAsTheAgent(t *testing.T) {
	needRoot(t)
	u, _ := throwawayAccount(t)
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir := t.TempDir()
	agentBin, fakeDocker := buildBinaries(t, filepath.Join(dir, "bin"))
	box := filepath.Join(dir, "box")
	cfgPath, ts, cleanup := convergedBoxWithTenancy(t, box, fakeDocker)
	defer cleanup()
	stateDir := filepath.Join(box, "state")
	if err := os.Chmod(cfgPath, 0o644); err != nil {
		t.Fatal(err)
	}
	openDirs(t, filepath.Join(dir, "bin"))
	openDirs(t, box)
	chownTree(t, stateDir, uid, gid)

	sudo := func(args ...string) (int, string, string) {
		t.Helper()
		cmd := exec.Command(agentBin, append([]string{"--config", cfgPath}, args...)...)
		cmd.Env = append(os.Environ(), "SUDO_USER=alice")
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
	}
	code, stdout, stderr := sudo("hold", "--reason", "db migration by hand", "--for", "2h")
	if code != 0 || !strings.Contains(stderr, "re-running as the owner of state_dir") || !strings.Contains(stdout, "held by alice until") {
		t.Fatalf("sudo hold: exit %d\n%s%s", code, stdout, stderr)
	}
	sp := filepath.Join(stateDir, "state.json")
	st, err := state.Load(sp)
	if err != nil || st.Hold == nil || st.Hold.By != "alice" || st.Hold.Reason != "db migration by hand" || st.Hold.Until.Sub(st.Hold.Since) != 2*time.Hour {
		t.Fatalf("state after sudo hold: %+v, %v", st.Hold, err)
	}
	if got := ownerOf(t, sp); got != uint32(uid) {
		t.Errorf("state.json belongs to uid %d after a sudo hold, want the agent's %d", got, uid)
	}

	code, _, stderr = sudo("tick")
	if code != 0 {
		t.Fatalf("sudo tick while held: exit %d\n%s", code, stderr)
	}
	cs := ts.Checkins(benchEnv)
	if h := cs[len(cs)-1].Request.Hold; h == nil || h.By != "alice" || h.Reason != "db migration by hand" {
		t.Errorf("the check-in's hold = %+v", h)
	}
	if r, _ := ts.LastReport(benchEnv); !strings.Contains(r.Detail, "held by alice until") {
		t.Errorf("report while held = %+v", r)
	}

	code, stdout, stderr = sudo("unhold")
	if code != 0 || !strings.Contains(stdout, "hold ended: held by alice") {
		t.Fatalf("sudo unhold: exit %d\n%s%s", code, stdout, stderr)
	}
	if st, _ := state.Load(sp); st.Hold != nil || ownerOf(t, sp) != uint32(uid) {
		t.Errorf("after sudo unhold: hold %+v, owner %d", st.Hold, ownerOf(t, sp))
	}
}
