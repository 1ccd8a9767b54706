package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"path/filepath"
	"slices"
	"strings"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/compose"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
)

// DefaultDockerHost is where the docker CLI connects without DOCKER_HOST or a context.
const DefaultDockerHost = "unix:///var/run/docker.sock"

// defaultDockerSocket is DefaultDockerHost's path.
const defaultDockerSocket = "/var/run/docker.sock"

// dockerEndpoint is a unix Socket (clean absolute path) or another Scheme, which modes do not govern.
type dockerEndpoint struct {
	Socket string
	Scheme string
	// Shown is the endpoint as messages print it (a password in it masked).
	Shown string
}

// parseDockerHost reads an endpoint as docker's opts.ParseHost does; bad ones are errors naming field.
func parseDockerHost(field, host string) (dockerEndpoint, error) {
	if host == "" {
		host = DefaultDockerHost
	}
	scheme, rest, found := strings.Cut(host, "://")
	if !found {
		return dockerEndpoint{Scheme: "tcp", Shown: host}, nil
	}
	shown := host
	u, uerr := url.Parse(host)
	switch {
	case uerr != nil:
		shown = scheme + "://…" // unparsable: nothing of it is printed, a password may be in it
	case u.User != nil:
		shown = u.Redacted()
	}
	switch scheme {
	case "unix":
		if rest == "" {
			rest = defaultDockerSocket
		}
		if !filepath.IsAbs(rest) {
			return dockerEndpoint{}, fmt.Errorf("%s %q: a unix socket needs an absolute path, as in %s", field, shown, DefaultDockerHost)
		}
		return dockerEndpoint{Socket: filepath.Clean(rest), Scheme: scheme, Shown: "unix://" + filepath.Clean(rest)}, nil
	case "tcp", "npipe", "fd", "ssh":
		if uerr != nil {
			return dockerEndpoint{}, fmt.Errorf("%s %q: not a %s address", field, shown, scheme)
		}
		return dockerEndpoint{Scheme: scheme, Shown: shown}, nil
	}
	return dockerEndpoint{}, fmt.Errorf("%s %q: scheme %q is not one docker knows (tcp, unix, npipe, fd, ssh)", field, shown, scheme)
}

// contextInspectArgs print the endpoint the docker CLI resolves (current context).
var contextInspectArgs = []string{"context", "inspect", "--format", "{{.Endpoints.docker.Host}}"}

// tickEnv is a tick's environment (the unit sets no DOCKER_HOST or DOCKER_CONTEXT), so doctor
// looks at the engine ticks reach whatever its shell exports.
var tickEnv = []string{"DOCKER_HOST=", "DOCKER_CONTEXT="}

// tickRunner runs docker as a tick would: without doctor's DOCKER_HOST and DOCKER_CONTEXT.
type tickRunner struct{ runner.Runner }

func (r tickRunner) Run(ctx context.Context, c runner.Cmd) (runner.Result, error) {
	c.Env = append(slices.Clone(c.Env), tickEnv...)
	return r.Runner.Run(ctx, c)
}

// tickEndpoint asks the agent's docker CLI where it connects; a failure fails the check (and ticks).
func (c *checker) tickEndpoint(ctx context.Context) (dockerEndpoint, *Result) {
	cfg := c.cfg()
	res, err := c.env.Runner.Run(ctx, c.dockerCLI().Command(contextInspectArgs...))
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, compose.Tail(c.red.Redact(string(res.Stderr)+string(res.Stdout)), 300))
	}
	if err != nil {
		r := fail(fmt.Sprintf("the agent's docker CLI cannot say which engine it connects to (`docker context inspect` with DOCKER_CONFIG=%s): %v", cfg.DockerConfigDir(), err),
			fmt.Sprintf("check currentContext in %s/config.json (remove it to use %s), or `docker context ls` with DOCKER_CONFIG=%s", cfg.DockerConfigDir(), DefaultDockerHost, cfg.DockerConfigDir()))
		return dockerEndpoint{}, &r
	}
	host := strings.TrimSpace(string(res.Stdout))
	ep, perr := parseDockerHost("the agent's docker endpoint (docker context inspect)", host)
	if perr != nil {
		r := fail(perr.Error(), fmt.Sprintf("correct the current context in %s/config.json (`docker context ls` with DOCKER_CONFIG=%s), or remove currentContext to use %s", cfg.DockerConfigDir(), cfg.DockerConfigDir(), DefaultDockerHost))
		return dockerEndpoint{}, &r
	}
	return ep, nil
}

// doctorHostNote notes doctor's own DOCKER_HOST set aside when it resolves elsewhere; "" otherwise.
func (c *checker) doctorHostNote(ctx context.Context, tick dockerEndpoint) string {
	if c.env.DockerHost == "" {
		return ""
	}
	r := c.env.Runner
	if t, ok := r.(tickRunner); ok {
		r = t.Runner // this one call runs as doctor's shell would
	}
	cmd := c.dockerCLI().Command(contextInspectArgs...)
	cmd.Env = append(cmd.Env, "DOCKER_HOST="+c.env.DockerHost, "DOCKER_CONTEXT=")
	res, err := r.Run(ctx, cmd)
	shown := ""
	switch {
	case err != nil:
		shown = err.Error()
	case res.ExitCode != 0:
		shown = fmt.Sprintf("docker cannot use it: exit %d", res.ExitCode) // its words may quote a password
	default:
		mine, perr := parseDockerHost("DOCKER_HOST", strings.TrimSpace(string(res.Stdout)))
		if perr == nil && mine.Shown == tick.Shown {
			return ""
		}
		shown = mine.Shown
		if perr != nil {
			shown = perr.Error()
		}
	}
	return fmt.Sprintf("doctor's DOCKER_HOST (%s) was set aside: the unit sets none, so ticks connect to %s, which is what was checked", shown, tick.Shown)
}

// tickAccount is the agent as its ticks run: the database's groups only. The unit once added
// SupplementaryGroups=docker, which failed the tick (216/GROUP) on boxes without that group.
func (c *checker) tickAccount() Account {
	a := *c.env.Agent
	a.GIDs = append([]uint32(nil), a.GIDs...)
	return a
}

// dockerSocket asks whether the agent's ticks can use the endpoint their CLI resolves, trying it
// as the agent (root reaching it proves nothing). It returns a failure or notes for the OK line.
func (c *checker) dockerSocket(ctx context.Context) (notes []string, failed *Result) {
	self := c.userName(c.env.Self.UID)
	ep, res := c.tickEndpoint(ctx)
	if res != nil {
		return nil, res
	}
	if n := c.doctorHostNote(ctx, ep); n != "" {
		notes = append(notes, n)
	}
	if c.env.Agent == nil {
		return append(notes, "the agent's access is not judged without its user (see user)"), nil
	}
	a := c.tickAccount()
	if ep.Socket == "" {
		// A network endpoint: access is TLS or ssh keys, not file modes.
		n := fmt.Sprintf("the agent's docker connects to %s, a %s endpoint, not a socket file, so %s's access to it cannot be judged by file modes: what was checked is that docker info answered there as %s", ep.Shown, ep.Scheme, a.Name, self)
		if c.asAnotherUser() {
			n += fmt.Sprintf(" (run doctor as %s to check with its keys)", a.Name)
		}
		return append(notes, n), nil
	}
	sock := ep.Socket
	fi, err := c.env.Stat(sock)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		r := fail(fmt.Sprintf("docker info answered as %s, but the socket %s, where the agent's docker connects, does not exist", self, sock),
			"systemctl enable --now docker.socket docker (the engine's socket is "+DefaultDockerHost+")")
		return nil, &r
	case err != nil:
		r := fail(fmt.Sprintf("cannot look at the docker socket %s: %v", sock, err), lookFix(sock))
		return nil, &r
	case fi.Mode.Type() != fs.ModeSocket:
		r := fail(fmt.Sprintf("%s is not a socket (%s %s)", sock, fileType(fi.Mode), c.describe(fi)),
			fmt.Sprintf("rm -r %s && systemctl restart docker.socket docker (a directory there is what a bind mount of a missing socket leaves)", sock))
		return nil, &r
	}
	v, err := c.judgePath(ctx, a, sock, "-w") // connect(2) needs write on the socket, nothing else
	if err != nil {
		r := fail(fmt.Sprintf("cannot look at the docker socket %s: %v", sock, err), lookFix(sock))
		return nil, &r
	}
	if v.Denied != "" {
		r := fail(fmt.Sprintf("docker info answered as %s, but %s %s", self, a.Name, v.Denied), c.socketFix(a, sock, fi, v.DeniedAt))
		return nil, &r
	}
	desc := c.describe(fi)
	if len(v.ViaACL) > 0 {
		n := fmt.Sprintf("socket %s is %s: the mode bits deny %s on %s and only an ACL grants it", sock, desc, a.Name, strings.Join(v.ViaACL, ", "))
		if slices.Contains(v.ViaACL, sock) {
			n += "; an ACL on the socket vanishes when dockerd (or docker.socket) recreates it at its next start, unless something re-applies it: SocketGroup=docker and SocketMode=0660 in docker.socket last"
		}
		return append(notes, n), nil
	}
	var via string
	switch {
	case a.UID == 0:
		via = "as root"
	case fi.UID == a.UID:
		via = "as its owner"
	case a.InGroup(fi.GID):
		via = "through group " + c.groupName(fi.GID)
	default:
		via = "through its bits for others"
	}
	return append(notes, fmt.Sprintf("socket %s is %s: %s reaches it %s", sock, desc, a.Name, via)), nil
}

// socketFix: search on the blocking directory, else a lasting socket group and mode (it is recreated).
func (c *checker) socketFix(a Account, sock string, fi FileInfo, deniedAt string) string {
	if deniedAt != sock {
		return fmt.Sprintf("chmod o+x %s (the directories above the docker socket must be searchable by %s)", deniedAt, a.Name)
	}
	lasting := "; dockerd recreates the socket at every start, so make it last: SocketMode=0660 and SocketGroup=docker in docker.socket (systemctl edit docker.socket), or \"group\": \"docker\" in /etc/docker/daemon.json"
	usermod := fmt.Sprintf("usermod -a -G docker %s (the next tick picks it up; a shell needs a new login)", a.Name)
	switch {
	case a.InGroup(fi.GID):
		return "chmod g+rw " + sock + lasting
	case c.groupName(fi.GID) == "docker":
		// The unit's account too: its groups come from the group database alone.
		return usermod
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
