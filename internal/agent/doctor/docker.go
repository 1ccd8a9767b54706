package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/compose"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/diskspace"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/clip"
)

// defaultDataRoot is docker's data-root when `docker info` cannot say.
const defaultDataRoot = "/var/lib/docker"

// dockerFailure turns a failed docker call into a detail and a fix that names the cause.
func (c *checker) dockerFailure(err error) Result {
	cfg := c.cfg()
	var ce *compose.CmdError
	switch {
	case errors.Is(err, runner.ErrNotFound):
		return fail(fmt.Sprintf("the docker CLI %q is not installed or not on PATH", cfg.DockerBin),
			"install docker (docker-ce and docker-ce-cli, or docker.io), or set docker_bin in "+cfg.Path)
	case errors.As(err, &ce) && strings.Contains(strings.ToLower(ce.Output), "permission denied"):
		return fail(fmt.Sprintf("%s may not use the docker socket: %s", c.userName(c.env.Self.UID), compose.Tail(ce.Output, 300)),
			fmt.Sprintf("usermod -a -G docker %s (the next tick picks it up; a shell needs a new login)", c.agentName()))
	case errors.As(err, &ce) && (strings.Contains(ce.Output, "Cannot connect to the Docker daemon") || strings.Contains(ce.Output, "Is the docker daemon running")):
		return fail("the docker engine is not running: "+compose.Tail(ce.Output, 300), "systemctl enable --now docker")
	case errors.Is(err, context.DeadlineExceeded):
		return fail("docker did not answer: "+err.Error(), "the engine is hung: systemctl status docker; journalctl -u docker")
	}
	return fail(err.Error(), fmt.Sprintf("run `DOCKER_CONFIG=%s %s info` as %s to see the whole error", cfg.DockerConfigDir(), cfg.DockerBin, c.agentName()))
}

// docker: the engine answers `docker info`, and the agent's ticks may use their endpoint, asked of
// the CLI as a tick runs it (tickEnv) and judged from the socket's owner, mode and ACL as the agent.
func (c *checker) docker(ctx context.Context) Result {
	info, err := c.dockerInfo(ctx)
	if err != nil {
		return c.dockerFailure(err)
	}
	detail := fmt.Sprintf("engine %s reachable as %s, data-root %s", orDash(info.ServerVersion), c.userName(c.env.Self.UID), orDash(info.DockerRootDir))
	notes, failed := c.dockerSocket(ctx)
	if failed != nil {
		return *failed
	}
	return ok("%s; %s", detail, strings.Join(notes, "; "))
}

// composeMajor reads the major of `docker compose version --short` ("v2.40.3"); else an error.
func composeMajor(v string) (int, error) {
	s := strings.TrimPrefix(strings.TrimSpace(v), "v")
	head, _, _ := strings.Cut(s, ".")
	n, err := strconv.Atoi(head)
	if err != nil || n < 0 || head == "" || len(head) > 4 {
		return 0, fmt.Errorf("compose version %q is not a version number", clip.Head(v, 40))
	}
	return n, nil
}

func (c *checker) pluginDirs() []string {
	if c.env.PluginDirs != nil {
		return c.env.PluginDirs
	}
	return DefaultPluginDirs
}

// ComposeFix is where a Debian box gets compose v2, system-wide (install.sh and the ansible role
// say the same): bookworm's own docker-compose is v1, which the agent does not drive.
const ComposeFix = "install compose v2 system-wide: docker-compose-plugin from Docker's apt repository (download.docker.com/linux/debian, as docs.docker.com/engine/install/debian sets it up), " +
	"or Debian's own docker-compose on releases that ship v2 (Debian 13 trixie and later; bookworm's is v1); either lands in /usr/libexec/docker/cli-plugins. " +
	"A plugin under ~/.docker/cli-plugins is hidden from the agent by DOCKER_CONFIG"

// compose: `docker compose` must work with the agent's DOCKER_CONFIG, be v2+, in a system plugin dir.
func (c *checker) compose(ctx context.Context) Result {
	installFix := ComposeFix
	var found string
	for _, d := range c.pluginDirs() {
		p := filepath.Join(d, "docker-compose")
		if fi, err := c.env.Stat(p); err == nil && fi.Mode.IsRegular() {
			found = p
			break
		}
	}
	v, err := c.dockerCLI().ComposeVersion(ctx)
	var ce *compose.CmdError
	switch {
	case err != nil && errors.As(err, &ce) && strings.Contains(ce.Output, "is not a docker command"):
		return fail(fmt.Sprintf("`docker compose` does not exist with DOCKER_CONFIG=%s", c.cfg().DockerConfigDir()), installFix)
	case err != nil && errors.Is(err, runner.ErrNotFound):
		return fail("cannot run docker (see docker)", firstFix("docker"))
	case err != nil:
		return fail(err.Error(), installFix)
	}
	major, perr := composeMajor(v)
	switch {
	case perr != nil:
		return fail(perr.Error(), installFix)
	case major < 2:
		return fail(fmt.Sprintf("docker compose %s is compose v1, which the agent does not drive", v), installFix)
	case found == "":
		return fail(fmt.Sprintf("docker compose %s runs here, but from none of %s: a plugin in a per-user directory can vanish for the agent", v, strings.Join(c.pluginDirs(), ", ")), installFix)
	}
	return ok("docker compose %s (%s) with DOCKER_CONFIG=%s", v, found, c.cfg().DockerConfigDir())
}

// dockerConfig: <state_dir>/docker holds the registry credential: 0700 and config.json 0600, agent's.
func (c *checker) dockerConfig(context.Context) Result {
	cfg := c.cfg()
	dir := cfg.DockerConfigDir()
	a := c.env.Agent
	if a == nil {
		return fail("cannot judge without the agent's user (see user)", firstFix("user"))
	}
	fi, err := c.env.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		pfi, perr := c.env.Stat(cfg.StateDir)
		switch {
		case errors.Is(perr, fs.ErrNotExist):
			return fail(fmt.Sprintf("neither %s nor state_dir %s exists", dir, cfg.StateDir),
				fmt.Sprintf("install -d -m 0700 -o %s -g %s %s", a.Name, a.Name, cfg.StateDir))
		case perr != nil:
			return fail(fmt.Sprintf("cannot look at %s: %v", cfg.StateDir, perr), lookFix(cfg.StateDir))
		case !modeAllows(*a, pfi, permW|permX):
			return fail(fmt.Sprintf("%s does not exist and %s cannot create it in %s (%s)", dir, a.Name, cfg.StateDir, c.describe(pfi)),
				fmt.Sprintf("chown %s:%s %s && chmod 0700 %s", a.Name, a.Name, cfg.StateDir, cfg.StateDir))
		}
		return ok("%s does not exist yet; %s creates it 0700 with the first registry credential", dir, a.Name)
	}
	if err != nil {
		return fail(fmt.Sprintf("cannot look at %s: %v", dir, err), lookFix(dir))
	}
	if !fi.Mode.IsDir() {
		return fail(dir+" is not a directory", fmt.Sprintf("rm %s (the agent recreates it 0700)", dir))
	}
	var problems, fixes []string
	if fi.UID != a.UID {
		problems = append(problems, fmt.Sprintf("%s is owned by %s, not %s", dir, c.userName(fi.UID), a.Name))
		fixes = append(fixes, fmt.Sprintf("chown -R %s:%s %s", a.Name, a.Name, dir))
	}
	if fi.Mode.Perm() != 0o700 {
		problems = append(problems, fmt.Sprintf("%s is mode %04o, want 0700", dir, fi.Mode.Perm()))
		fixes = append(fixes, "chmod 0700 "+dir)
	}
	cred := filepath.Join(dir, "config.json")
	credNote := "no config.json yet"
	cfi, cerr := c.env.Stat(cred)
	switch {
	case cerr == nil:
		credNote = "config.json 0600"
		if cfi.UID != a.UID && fi.UID == a.UID {
			problems = append(problems, fmt.Sprintf("%s is owned by %s, not %s", cred, c.userName(cfi.UID), a.Name))
			fixes = append(fixes, fmt.Sprintf("chown %s:%s %s", a.Name, a.Name, cred))
		}
		if cfi.Mode.Perm() != 0o600 {
			problems = append(problems, fmt.Sprintf("%s is mode %04o, want 0600", cred, cfi.Mode.Perm()))
			fixes = append(fixes, "chmod 0600 "+cred)
		}
	case !errors.Is(cerr, fs.ErrNotExist):
		problems = append(problems, fmt.Sprintf("cannot look at %s: %v", cred, cerr))
	}
	if len(problems) > 0 {
		return fail(strings.Join(problems, "; ")+" (it holds the registry credential)", strings.Join(fixes, " && "))
	}
	return ok("%s is 0700, owned by %s; %s", dir, a.Name, credNote)
}

// StateDirFloor is the free space wanted on state_dir when it holds no image storage; releases
// and state are kilobytes.
const StateDirFloor = int64(256) << 20

// disk: data-root and containerd's root (env-dev-08: 93 GiB where the Python agent looked, 2.8 GiB
// where pulls wrote) must clear disk.headroom_bytes as the tick checks; state_dir StateDirFloor.
func (c *checker) disk(ctx context.Context) Result {
	cfg := c.cfg()
	headroom := cfg.Disk.HeadroomBytes
	root := defaultDataRoot
	var notes []string
	info, err := c.dockerInfo(ctx)
	switch {
	case err != nil:
		notes = append(notes, "docker info failed, so the default data-root "+defaultDataRoot+" was measured")
	case info.DockerRootDir != "":
		root = info.DockerRootDir
	}
	// As the agent measures: data-root via its nearest existing parent, containerd's root if present.
	images := []string{root}
	if cfg.ContainerdRoot != "" && filepath.Clean(cfg.ContainerdRoot) != filepath.Clean(root) {
		images = append(images, cfg.ContainerdRoot)
	}
	_, measures, err := c.env.Meter.Tightest(images)
	if err != nil {
		return fail("cannot measure free space: "+err.Error(), lookFix(strings.Join(images, " ")))
	}
	if len(images) > 1 && len(measures) < 2 {
		notes = append(notes, fmt.Sprintf("containerd_root %s does not exist (not used by this engine)", cfg.ContainerdRoot))
	}
	what := []string{"data-root", "containerd_root"}[:len(measures)]
	// state_dir through its nearest existing parent: the agent creates it at its first tick.
	_, sm, err := c.env.Meter.Tightest([]string{cfg.StateDir})
	if err != nil {
		return fail("cannot measure free space: "+err.Error(), lookFix(cfg.StateDir))
	}
	measures = append(measures, sm...)
	what = append(what, "state_dir")

	groups := c.byFilesystem(measures, what)
	var parts, low, lowState []string
	var tightest *fsGroup
	for i := range groups {
		g := &groups[i]
		parts = append(parts, g.text)
		images := !(len(g.names) == 1 && g.names[0] == "state_dir")
		if images && (tightest == nil || g.free < tightest.free) {
			tightest = g
		}
		switch {
		case images && g.free < headroom:
			low = append(low, strings.Join(g.paths, " and "))
		case !images && g.free < StateDirFloor:
			lowState = append(lowState, strings.Join(g.paths, " and "))
		}
	}
	detail := strings.Join(parts, ", ")
	if len(groups) > 1 && tightest != nil {
		detail += fmt.Sprintf("; tightest image storage %s (%s)", bytesText(tightest.free), strings.Join(tightest.names, ", "))
	}
	detail += fmt.Sprintf("; headroom %s", bytesText(headroom))
	if len(notes) > 0 {
		detail += "; " + strings.Join(notes, "; ")
	}
	var problems, fixes []string
	if len(low) > 0 {
		problems = append(problems, "under the headroom")
		fixes = append(fixes, fmt.Sprintf("free at least %s on the filesystem of %s: `docker image prune -a` removes images no container uses; until then every bundle is refused with DISK_INSUFFICIENT", bytesText(headroom), strings.Join(low, " and ")))
	}
	if len(lowState) > 0 {
		problems = append(problems, fmt.Sprintf("state_dir under %s", bytesText(StateDirFloor)))
		fixes = append(fixes, fmt.Sprintf("free at least %s on the filesystem of %s: each release's files, its .env and the agent's state are written there, and a tick does not measure it, so a full disk fails the tick's writes rather than refusing the bundle", bytesText(StateDirFloor), strings.Join(lowState, " and ")))
	}
	if len(problems) > 0 {
		return fail(strings.Join(problems, ", ")+": "+detail, strings.Join(fixes, "; "))
	}
	return ok("%s", detail)
}

// fsGroup is the paths measured on one filesystem.
type fsGroup struct {
	names []string // data-root, state_dir…
	paths []string
	free  int64
	text  string
}

// byFilesystem groups measures by device, in first-measured order; unknown devices stand alone.
func (c *checker) byFilesystem(measures []diskspace.Measure, what []string) []fsGroup {
	var groups []fsGroup
	var devs []uint64
	var members [][]int
	for i, m := range measures {
		var dev uint64
		if fi, err := c.env.Stat(m.At); err == nil {
			dev = fi.Dev
		}
		j := -1
		if dev != 0 {
			j = slices.Index(devs, dev)
		}
		if j < 0 {
			devs = append(devs, dev)
			members = append(members, nil)
			j = len(devs) - 1
		}
		members[j] = append(members[j], i)
	}
	for _, idx := range members {
		var g fsGroup
		var named []string
		for k, i := range idx {
			m := measures[i]
			at := m.Path
			if m.At != "" && m.At != filepath.Clean(m.Path) {
				at += " (measured at " + m.At + ")"
			}
			named = append(named, what[i]+" "+at)
			g.names = append(g.names, what[i])
			g.paths = append(g.paths, m.Path)
			if k == 0 || m.Free < g.free {
				g.free = m.Free
			}
		}
		g.text = strings.Join(named, " and ")
		if len(idx) > 1 {
			g.text += " (one filesystem)"
		}
		g.text += " " + bytesText(g.free) + " free"
		groups = append(groups, g)
	}
	return groups
}
