package doctor

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path/filepath"
	"strings"
)

// DefaultDockerHost is where the docker CLI connects without DOCKER_HOST, and so where every
// tick connects: the unit sets no DOCKER_HOST.
const DefaultDockerHost = "unix:///var/run/docker.sock"

// dockerEndpoint is what DOCKER_HOST names: a unix socket (Socket, a clean absolute path) or
// another kind of endpoint (Scheme, e.g. tcp or ssh), which file modes do not govern.
type dockerEndpoint struct {
	Socket string
	Scheme string
	// Shown is the endpoint as messages print it (a password in it masked).
	Shown string
}

// parseDockerHost reads DOCKER_HOST as the docker CLI does: "" is DefaultDockerHost, and an
// address without a scheme is tcp. A unix address without an absolute path is an error naming
// DOCKER_HOST.
func parseDockerHost(host string) (dockerEndpoint, error) {
	if host == "" {
		host = DefaultDockerHost
	}
	scheme, rest, found := strings.Cut(host, "://")
	if !found {
		return dockerEndpoint{Scheme: "tcp", Shown: host}, nil
	}
	if scheme == "unix" {
		if rest == "" || !filepath.IsAbs(rest) {
			return dockerEndpoint{}, fmt.Errorf("DOCKER_HOST %q: a unix socket needs an absolute path, as in %s", host, DefaultDockerHost)
		}
		return dockerEndpoint{Socket: filepath.Clean(rest), Scheme: scheme, Shown: "unix://" + filepath.Clean(rest)}, nil
	}
	shown := host
	if u, err := url.Parse(host); err == nil {
		shown = u.Redacted()
	}
	return dockerEndpoint{Scheme: scheme, Shown: shown}, nil
}

// tickAccount is the agent as its ticks run: the groups the group database gives it, plus group
// docker when it is the unit's User= (the unit adds SupplementaryGroups=docker, which the group
// database does not show). unitGID is the gid the unit adds (0 when none); a Result is returned
// when the unit could not start at all.
func (c *checker) tickAccount() (a Account, unitGID uint32, failed *Result) {
	a = *c.env.Agent
	a.GIDs = append([]uint32(nil), a.GIDs...)
	if a.Name != AgentUser || c.env.LookupGroup == nil {
		return a, 0, nil
	}
	gid, err := c.env.LookupGroup("docker")
	if err != nil {
		r := fail(fmt.Sprintf("there is no group docker, so the unit's SupplementaryGroups=docker cannot start the tick as %s", a.Name),
			"groupadd docker && systemctl restart docker (the socket is then group docker)")
		return a, 0, &r
	}
	if !a.InGroup(gid) {
		a.GIDs = append(a.GIDs, gid)
	}
	return a, gid, nil
}

// dockerSocket judges whether the agent's ticks can use the engine's socket, from its owner,
// group and mode and the agent's groups (root reaching the engine proves nothing about the
// agent, and neither does a shell's group list). It returns a failure, or a note for the OK line.
func (c *checker) dockerSocket() (note string, failed *Result) {
	self := c.userName(c.env.Self.UID)
	if c.env.Agent == nil {
		return "the agent's access is not judged without its user (see user)", nil
	}
	a, unitGID, res := c.tickAccount()
	if res != nil {
		return "", res
	}
	ep, err := parseDockerHost(c.env.DockerHost)
	if err != nil {
		r := fail(err.Error(), "unset DOCKER_HOST (the engine's socket is "+DefaultDockerHost+") or set it to unix:///ABSOLUTE/PATH")
		return "", &r
	}
	if ep.Socket == "" {
		// A network endpoint: access is TLS or ssh keys, not file modes, and the unit's ticks do
		// not even see this DOCKER_HOST.
		return fmt.Sprintf("DOCKER_HOST=%s is a %s endpoint, not a socket file, so %s's access to it cannot be judged by file modes: what was checked is that docker info answered as %s; the unit sets no DOCKER_HOST, so ticks use %s unless a drop-in sets Environment=DOCKER_HOST",
			ep.Shown, ep.Scheme, a.Name, self, DefaultDockerHost), nil
	}
	sock := ep.Socket
	fi, err := c.env.Stat(sock)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r := fail(fmt.Sprintf("docker info answered as %s, but the socket %s does not exist: %s's docker has nothing to connect to (doctor's docker reached an engine some other way, e.g. a docker context, which the agent's DOCKER_CONFIG=%s hides)", self, sock, a.Name, c.cfg().DockerConfigDir()),
			"systemctl enable --now docker.socket docker (the engine's socket is "+DefaultDockerHost+")")
		return "", &r
	case err != nil:
		r := fail(fmt.Sprintf("cannot look at the docker socket %s: %v", sock, err), "")
		return "", &r
	case fi.Mode.Type() != fs.ModeSocket:
		r := fail(fmt.Sprintf("%s is not a socket (%s %s)", sock, fileType(fi.Mode), c.describe(fi)),
			fmt.Sprintf("rm -r %s && systemctl restart docker.socket docker (a directory there is what a bind mount of a missing socket leaves)", sock))
		return "", &r
	}
	v, err := judgePath(a, sock, permW, c.env.Stat, c.describe) // connect(2) needs write on the socket, nothing else
	if err != nil {
		r := fail(fmt.Sprintf("cannot look at the docker socket %s: %v", sock, err), "")
		return "", &r
	}
	if v.Denied != "" {
		detail := fmt.Sprintf("docker info answered as %s, but %s %s", self, a.Name, v.Denied)
		if !c.judgedByMode() {
			detail += " by the groups its ticks get (this session's reach rests on a group or ACL the timer's runs do not have)"
		}
		r := fail(detail, c.socketFix(a, unitGID, sock, fi, v.DeniedAt))
		return "", &r
	}
	desc := c.describe(fi)
	if len(v.ViaACL) > 0 {
		return fmt.Sprintf("socket %s is %s: the mode bits deny %s on %s and only an ACL can grant it", sock, desc, a.Name, strings.Join(v.ViaACL, ", ")), nil
	}
	var via string
	switch {
	case a.UID == 0:
		via = "as root"
	case fi.UID == a.UID:
		via = "as its owner"
	case a.InGroup(fi.GID) && fi.GID == unitGID && !c.env.Agent.InGroup(unitGID):
		via = fmt.Sprintf("through group %s, which the unit adds (SupplementaryGroups=docker)", c.groupName(fi.GID))
	case a.InGroup(fi.GID) && fi.GID == unitGID:
		via = fmt.Sprintf("through group %s (the unit's SupplementaryGroups=docker adds it too)", c.groupName(fi.GID))
	case a.InGroup(fi.GID):
		via = "through group " + c.groupName(fi.GID)
	default:
		via = "through its bits for others"
	}
	return fmt.Sprintf("socket %s is %s: %s reaches it %s", sock, desc, a.Name, via), nil
}

// socketFix says how to let a use the socket: search on the directory that stops it, else the
// socket's group and mode, made to last (dockerd, or systemd's docker.socket, recreates the
// socket at every start).
func (c *checker) socketFix(a Account, unitGID uint32, sock string, fi FileInfo, deniedAt string) string {
	if deniedAt != sock {
		return fmt.Sprintf("chmod o+x %s (the directories above the docker socket must be searchable by %s)", deniedAt, a.Name)
	}
	lasting := "; dockerd recreates the socket at every start, so make it last: SocketMode=0660 and SocketGroup=docker in docker.socket (systemctl edit docker.socket), or \"group\": \"docker\" in /etc/docker/daemon.json"
	usermod := fmt.Sprintf("usermod -a -G docker %s (a new login picks it up)", a.Name)
	switch {
	case a.InGroup(fi.GID):
		return "chmod g+rw " + sock + lasting
	case c.groupName(fi.GID) == "docker":
		// Only an account other than the unit's can lack the group: the unit adds it.
		return usermod
	case unitGID != 0:
		return fmt.Sprintf("chgrp docker %s && chmod 0660 %s", sock, sock) + lasting
	}
	return fmt.Sprintf("chgrp docker %s && chmod 0660 %s && %s", sock, sock, usermod) + lasting
}

func fileType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "a directory"
	case m.IsRegular():
		return "a regular file"
	case m&fs.ModeSymlink != 0:
		return "a symlink"
	}
	return "a " + m.Type().String()
}
