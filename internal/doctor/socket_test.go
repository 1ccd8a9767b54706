package doctor

import (
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
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
			want{status: OK, detail: []string{"as root", "socket SOCK is root:docker 0660", "monky-deployd reaches it through group docker", "SupplementaryGroups=docker"}}},
		{"root:docker 0660, group docker only from the unit", func(f *fixture) {
			f.asRoot()
			f.env.Agent.GIDs = []uint32{agentGID, zitiGID}
		}, want{status: OK, detail: []string{"through group docker, which the unit adds (SupplementaryGroups=docker)"}}},
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
		{"an ACL may grant it", func(f *fixture) {
			f.asRoot()
			f.fs.stat[f.sock] = FileInfo{Mode: fs.ModeSocket | 0o660, ACL: true}
		}, want{status: OK, detail: []string{"only an ACL can grant it"}}},
		{"a directory that is not searchable", func(f *fixture) {
			f.asRoot()
			dir := filepath.Join(f.dir, "run")
			f.sock = filepath.Join(dir, "docker.sock")
			f.env.DockerHost = "unix://" + f.sock
			f.fs.stat[dir] = FileInfo{Mode: fs.ModeDir | 0o700}
			f.fs.stat[f.sock] = sockInfo(0o660, 0, dockerGID)
		}, want{status: Fail, detail: []string{"cannot enter"}, fix: []string{"chmod o+x"}}},
		{"no socket", func(f *fixture) {
			f.asRoot()
			delete(f.fs.stat, f.sock)
		}, want{status: Fail, detail: []string{"the socket SOCK does not exist", "docker context"}, fix: []string{"systemctl enable --now docker.socket"}}},
		{"a directory where the socket should be", func(f *fixture) {
			f.asRoot()
			f.fs.stat[f.sock] = FileInfo{Mode: fs.ModeDir | 0o755}
		}, want{status: Fail, detail: []string{"SOCK is not a socket (a directory root:root 0755)"}, fix: []string{"rm -r SOCK"}}},
		{"no DOCKER_HOST: the default socket", func(f *fixture) {
			f.asRoot()
			f.env.DockerHost = ""
			f.sock = "/var/run/docker.sock"
			f.fs.stat["/var"] = FileInfo{Mode: fs.ModeDir | 0o755}
			f.fs.stat["/var/run"] = FileInfo{Mode: fs.ModeDir | 0o755}
			f.fs.stat[f.sock] = sockInfo(0o660, 0, 0)
		}, want{status: Fail, detail: []string{"cannot use /var/run/docker.sock (root:root 0660)"}, fix: []string{"chgrp docker /var/run/docker.sock"}}},
		{"tcp DOCKER_HOST: not judged by modes, and said so", func(f *fixture) {
			f.asRoot()
			f.env.DockerHost = "tcp://10.0.0.5:2376"
			delete(f.fs.stat, f.sock) // no socket file is looked at
		}, want{status: OK, detail: []string{"DOCKER_HOST=tcp://10.0.0.5:2376 is a tcp endpoint", "cannot be judged by file modes", "docker info answered as root", "the unit sets no DOCKER_HOST"}}},
		{"ssh DOCKER_HOST", func(f *fixture) {
			f.asRoot()
			f.env.DockerHost = "ssh://deploy@build-01"
		}, want{status: OK, detail: []string{"ssh://deploy@build-01 is a ssh endpoint"}}},
		{"unix DOCKER_HOST without an absolute path", func(f *fixture) {
			f.asRoot()
			f.env.DockerHost = "unix://docker.sock"
		}, want{status: Fail, detail: []string{`DOCKER_HOST "unix://docker.sock"`, "absolute path"}, fix: []string{"unset DOCKER_HOST"}}},
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
			tc.want.assert(t, f.check("docker"))
		})
	}
}

func TestParseDockerHost(t *testing.T) {
	for _, tc := range []struct {
		in             string
		socket, scheme string
		shown          string
		bad            bool
	}{
		{"", "/var/run/docker.sock", "unix", "unix:///var/run/docker.sock", false},
		{"unix:///run/user/1000/docker.sock", "/run/user/1000/docker.sock", "unix", "unix:///run/user/1000/docker.sock", false},
		{"unix:///run//docker.sock/", "/run/docker.sock", "unix", "unix:///run/docker.sock", false},
		{"tcp://127.0.0.1:2375", "", "tcp", "tcp://127.0.0.1:2375", false},
		{"127.0.0.1:2375", "", "tcp", "127.0.0.1:2375", false},
		{"ssh://u:hunter2@host", "", "ssh", "ssh://u:xxxxx@host", false},
		{"unix://", "", "", "", true},
		{"unix://run/docker.sock", "", "", "", true},
	} {
		ep, err := parseDockerHost(tc.in)
		if tc.bad {
			if err == nil || !strings.Contains(err.Error(), "DOCKER_HOST") {
				t.Errorf("parseDockerHost(%q) = %+v, %v; want an error naming DOCKER_HOST", tc.in, ep, err)
			}
			continue
		}
		if err != nil || ep.Socket != tc.socket || ep.Scheme != tc.scheme || ep.Shown != tc.shown {
			t.Errorf("parseDockerHost(%q) = %+v, %v", tc.in, ep, err)
		}
	}
}

func FuzzParseDockerHost(f *testing.F) {
	for _, s := range []string{"", "unix:///var/run/docker.sock", "tcp://h:2376", "unix://", "h:1", "ssh://u:p@h", "unix://../x"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		ep, err := parseDockerHost(host)
		if err != nil {
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
