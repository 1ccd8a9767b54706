package doctor

import (
	"context"
	"io/fs"
	"net/http"
	"slices"
	"sync"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/compose"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/diskspace"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/token"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// AgentUser is the account the package's units run the agent as (User=monky-deployd).
const AgentUser = "monky-deployd"

// DefaultPluginDirs are the docker CLI's system plugin directories: DOCKER_CONFIG moves the
// per-user one, so a plugin only under ~/.docker/cli-plugins vanishes for the agent.
var DefaultPluginDirs = []string{
	"/usr/local/lib/docker/cli-plugins",
	"/usr/local/libexec/docker/cli-plugins",
	"/usr/lib/docker/cli-plugins",
	"/usr/libexec/docker/cli-plugins",
}

// DockerTimeout bounds each check that runs the docker CLI.
const DockerTimeout = 60 * time.Second

// Account is a local user as the checks see it.
type Account struct {
	Name string
	UID  uint32
	// GIDs: primary plus every group the database lists, what a timer-started tick gets (not the
	// shell's groups).
	GIDs []uint32
}

// InGroup reports whether gid is one of a's groups.
func (a Account) InGroup(gid uint32) bool { return slices.Contains(a.GIDs, gid) }

// FileInfo is what the checks need to know of a file.
type FileInfo struct {
	Mode fs.FileMode
	UID  uint32
	GID  uint32
	// ACL is true when the file carries a POSIX access ACL.
	ACL bool
	// Dev is the file's filesystem device (0: unknown); equal non-zero Devs share free space.
	Dev uint64
}

// TenancyClient is the part of tenancy doctor calls; errors as tenancy.Client.Checkin, never
// carrying the token.
type TenancyClient interface {
	Checkin(ctx context.Context, token secret.Value, req protocol.CheckinRequest) (*protocol.CheckinResponse, error)
}

// BaoClient is the part of OpenBao doctor calls, as bao.Client.LookupSelf (an empty token still
// proves reach over verified TLS by its 403); errors never carry the token.
type BaoClient interface {
	LookupSelf(ctx context.Context, token secret.Value) (bao.TokenInfo, error)
}

// Meter measures free space (diskspace.Meter).
type Meter interface {
	Tightest(paths []string) (int64, []diskspace.Measure, error)
}

// Env is everything the checks look at: the real box, or fakes in tests.
type Env struct {
	ConfigPath string
	// Config is the loaded config; when ConfigErr is set instead, only the config check runs.
	Config    *config.Config
	ConfigErr error

	// Self is the process running doctor (Name and UID; GIDs unused).
	Self Account
	// Agent is the agent's account (nil: AgentErr says why); when not Self, access is tried as it.
	Agent    *Account
	AgentErr error
	// AgentName is the account asked for, for messages when Agent is nil.
	AgentName string
	// UserName and GroupName name a uid or gid ("" when unknown); LookupGroup finds a group by name.
	UserName    func(uid uint32) string
	GroupName   func(gid uint32) string
	LookupGroup func(name string) (uint32, error)

	// Stat follows symlinks and fails with an error matching fs.ErrNotExist for a missing path.
	Stat func(path string) (FileInfo, error)
	// ForeignFiles lists what under a directory uid does not own (nil: state.ForeignFiles).
	ForeignFiles func(dir string, uid uint32) ([]state.ForeignFile, bool, error)
	ReadFile     func(path string) ([]byte, error)

	// Runner runs docker as compose.Docker does; Checks adds the tick's environment (tickEnv).
	Runner runner.Runner
	Meter  Meter
	// Timer reads systemd.TimerUnit's state; Enabled is nil where systemd is absent or unreadable.
	Timer func(ctx context.Context) *protocol.Timer
	// PluginDirs are where a system-wide compose plugin may live (nil: DefaultPluginDirs).
	PluginDirs []string
	// DockerHost is doctor's own DOCKER_HOST; checks run docker as a tick does, without it, and the
	// docker line says when it was set aside.
	DockerHost string
	// ShellDocker runs docker with the caller's DOCKER_HOST and DOCKER_CONTEXT instead of a unit's
	// (none): `make demo`'s preflight, whose agents inherit the caller's environment.
	ShellDocker bool

	// Tenancy, TenancyHTTP and Bao go through the tick's transport; TransportErr and BaoErr say why
	// that transport or the OpenBao client could not be built.
	Tenancy     TenancyClient
	TenancyHTTP *http.Client
	Bao         BaoClient
	// BaoAt returns a client for the OpenBao at addr via the same transport (nil: bao.addr only).
	BaoAt        func(addr string) (BaoClient, error)
	TransportErr error
	BaoErr       error

	Hostname string
	Now      func() time.Time
}

// Checks returns env's checks in print order; the config check alone when the config fails to load.
func Checks(env *Env) []Check {
	if env.Runner != nil && !env.ShellDocker {
		// Every docker call runs as a tick's would (tickEnv); env itself is left as given.
		e := *env
		e.Runner = tickRunner{env.Runner}
		env = &e
	}
	c := &checker{env: env, red: &secret.Redactor{}}
	if env.ConfigErr != nil || env.Config == nil {
		return []Check{c.wrap(Check{Name: "config", Run: c.config})}
	}
	return []Check{
		c.wrap(Check{Name: "config", Run: c.config}),
		c.wrap(Check{Name: "user", Run: c.user}),
		c.wrap(Check{Name: "identity", Run: c.identity}),
		c.wrap(Check{Name: "identity-group", Run: c.identityGroup}),
		c.wrap(Check{Name: "docker", Run: c.docker, Timeout: DockerTimeout}),
		c.wrap(Check{Name: "compose", Run: c.compose, Timeout: DockerTimeout}),
		c.wrap(Check{Name: "docker-config", Run: c.dockerConfig}),
		c.wrap(Check{Name: "state-owner", Run: c.stateOwner}),
		c.wrap(Check{Name: "disk", Run: c.disk, Timeout: DockerTimeout}),
		c.wrap(Check{Name: "timer", Run: c.timerCheck}),
		c.wrap(Check{Name: "tenancy", Run: c.tenancy}),
		c.wrap(Check{Name: "openbao", Run: c.openbao}),
		c.wrap(Check{Name: "refused-token", Run: c.refusedToken}),
		c.wrap(Check{Name: "hold", Run: c.hold}),
	}
}

// Only keeps the checks named (doctor's names: docker, compose, …), in their order.
func Only(checks []Check, names ...string) []Check {
	var out []Check
	for _, c := range checks {
		if slices.Contains(names, c.Name) {
			out = append(out, c)
		}
	}
	return out
}

// checker holds what several checks share, each fetched once.
type checker struct {
	env *Env
	// red masks every secret doctor has read (the token), whatever a library puts in an error.
	red *secret.Redactor

	infoOnce sync.Once
	info     compose.Info
	infoErr  error

	timerOnce sync.Once
	timer     *protocol.Timer

	tokenOnce sync.Once
	token     secret.Value
	tokenErr  error

	stateOnce sync.Once
	st        *state.State
}

func (c *checker) wrap(ch Check) Check {
	run := ch.Run
	ch.Run = func(ctx context.Context) Result {
		r := run(ctx)
		r.Detail = c.red.Redact(r.Detail)
		r.Fix = c.red.Redact(r.Fix)
		return r
	}
	return ch
}

func (c *checker) cfg() *config.Config { return c.env.Config }

func (c *checker) dockerCLI() *compose.Docker {
	cfg := c.cfg()
	return &compose.Docker{
		Bin:       cfg.DockerBin,
		ConfigDir: cfg.DockerConfigDir(),
		Project:   cfg.ComposeProject,
		Runner:    c.env.Runner,
		Now:       c.now,
		Redact:    c.red,
	}
}

// dockerInfo is `docker info`, run once for the docker and disk checks.
func (c *checker) dockerInfo(ctx context.Context) (compose.Info, error) {
	c.infoOnce.Do(func() { c.info, c.infoErr = c.dockerCLI().Info(ctx) })
	return c.info, c.infoErr
}

// timerState is the timer's state, read once for the timer check and the check-in.
func (c *checker) timerState(ctx context.Context) *protocol.Timer {
	c.timerOnce.Do(func() {
		if c.env.Timer != nil {
			c.timer = c.env.Timer(ctx)
		}
	})
	return c.timer
}

// readToken reads the agent's OpenBao token once; a missing file is the empty token.
func (c *checker) readToken() (secret.Value, error) {
	c.tokenOnce.Do(func() {
		c.token, c.tokenErr = token.Read(c.cfg().TokenPath())
		c.red.Add(c.token.Reveal())
	})
	return c.token, c.tokenErr
}

// agentState is state.json, read once; unreadable or missing is an empty state, as for the tick.
func (c *checker) agentState() *state.State {
	c.stateOnce.Do(func() {
		st, err := state.Load(c.cfg().StatePath())
		if err != nil || st == nil {
			st = &state.State{}
		}
		c.st = st
	})
	return c.st
}

func (c *checker) now() time.Time {
	if c.env.Now != nil {
		return c.env.Now()
	}
	return time.Now()
}

func (c *checker) agentName() string {
	if c.env.Agent != nil {
		return c.env.Agent.Name
	}
	if c.env.AgentName != "" {
		return c.env.AgentName
	}
	return AgentUser
}

// asAnotherUser: doctor is not the agent (root after install.sh), so access is tried as the agent.
func (c *checker) asAnotherUser() bool {
	return c.env.Agent != nil && c.env.Agent.UID != c.env.Self.UID
}

func (c *checker) groupName(gid uint32) string {
	if c.env.GroupName != nil {
		if n := c.env.GroupName(gid); n != "" {
			return n
		}
	}
	return itoa(gid)
}

func (c *checker) userName(uid uint32) string {
	if c.env.Agent != nil && c.env.Agent.UID == uid {
		return c.env.Agent.Name
	}
	if c.env.Self.UID == uid && c.env.Self.Name != "" {
		return c.env.Self.Name
	}
	if c.env.UserName != nil {
		if n := c.env.UserName(uid); n != "" {
			return n
		}
	}
	if uid == 0 {
		return "root"
	}
	return "uid " + itoa(uid)
}

func ok(format string, args ...any) Result {
	return Result{Status: OK, Detail: sprintf(format, args...)}
}

func skip(format string, args ...any) Result {
	return Result{Status: Skip, Detail: sprintf(format, args...)}
}

func fail(detail, fix string) Result { return Result{Status: Fail, Detail: detail, Fix: fix} }

// Every failure carries a fix. These two are for the failures that have no fix of their own:
// one that depends on another check, and a path that cannot even be looked at.

// firstFix is the fix of a check that cannot judge until the named one passes.
func firstFix(check string) string {
	return "fix what the " + check + " check says first; this one is judged after it"
}

// lookFix is the fix when stat or statfs itself failed (EIO, ELOOP, a stale mount).
func lookFix(path string) string {
	return "look at " + path + " as root (ls -ld, df -h); an input/output error is the disk's (dmesg)"
}
