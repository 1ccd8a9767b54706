package cli

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/diskspace"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/doctor"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/identity"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/systemd"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/transport"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// doctorReadFile reads the identity (and the files it references) and bao.ca_file as the tick
// does: only a regular file, a FIFO in its place refused at once rather than waited on (the tick
// says `not a regular file (fifo)`, and the doctor an operator then runs hung on it), bounded by
// the larger of the tick's caps (bao.ca_file's; identity.Parse bounds the identity itself).
func doctorReadFile(path string) ([]byte, error) { return bao.ReadCAFile(path) }

type doctorOptions struct {
	json bool
	user string
}

// doctorDeps is the box doctor looks at; tests replace it.
type doctorDeps struct {
	runner      runner.Runner
	stat        func(string) (doctor.FileInfo, error)
	readFile    func(string) ([]byte, error)
	self        doctor.Account
	lookup      func(name string) (doctor.Account, error)
	userName    func(uint32) string
	groupName   func(uint32) string
	lookupGroup func(string) (uint32, error)
	timer       func(ctx context.Context, now time.Time) *protocol.Timer
	meter       doctor.Meter
	pluginDirs  []string
	hostname    string
	now         func() time.Time
}

func osDoctorDeps() doctorDeps {
	run := runner.Exec{}
	host, _ := os.Hostname()
	return doctorDeps{
		runner:      run,
		stat:        doctor.OSStat,
		readFile:    doctorReadFile,
		self:        doctor.CurrentAccount(),
		lookup:      doctor.LookupAccount,
		userName:    doctor.UserName,
		groupName:   doctor.GroupName,
		lookupGroup: doctor.LookupGroup,
		timer: func(ctx context.Context, now time.Time) *protocol.Timer {
			return systemd.TimerState(ctx, run, systemd.TimerUnit, now)
		},
		meter:    diskspace.Meter{},
		hostname: host,
		now:      time.Now,
	}
}

func newDoctorCommand(g *cliDeps) *cobra.Command {
	var opts doctorOptions
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check every precondition of a tick; one line each, OK/FAIL with the fix",
		Long: "doctor checks the config, the ziti identity and its group, docker and the compose plugin,\n" +
			"DOCKER_CONFIG, free disk, the timer, tenancy and OpenBao, and prints one line per check.\n" +
			"It exits 0 only when none fails (78 when the config does not load). Run it as root or as\n" +
			"the agent's user; as root, files are judged by the agent's permissions. It changes nothing\n" +
			"on the box; its tenancy check is a check-in carrying the same telemetry a tick sends.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runDoctor(cmd.Context(), opts, g, osDoctorDeps())
		},
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print a JSON document (schema 1)")
	cmd.Flags().StringVar(&opts.user, "user", "", "the account the agent runs as (default: the config's agent_user, "+doctor.AgentUser+", when run as root, else the current user)")
	return cmd
}

// exitUsage is a command line cobra could not refuse itself (a flag's value).
const exitUsage = 2

// runDoctor prints the results; exit 78 when the config fails to load, 1 when a check failed, 2
// for a --user that names no account.
func runDoctor(ctx context.Context, opts doctorOptions, g *cliDeps, d doctorDeps) error {
	if err := checkUserFlag(opts.user, d); err != nil {
		return &exitError{code: exitUsage, err: err}
	}
	cfg, cfgErr := config.Load(g.configPath)
	env := &doctor.Env{ConfigPath: g.configPath, Config: cfg, ConfigErr: cfgErr}
	if cfgErr == nil {
		closeFn := fillDoctorEnv(env, opts, d)
		defer closeFn()
		// Doctor runs docker as a tick does; its own DOCKER_HOST is only mentioned when it differs.
		env.DockerHost = g.getenv("DOCKER_HOST")
	}
	results, _ := doctor.Run(ctx, doctor.Checks(env))
	var err error
	if opts.json {
		err = doctor.WriteJSON(g.stdout, g.configPath, results)
	} else {
		err = doctor.Print(g.stdout, results)
	}
	if err != nil {
		return &exitError{code: tick.ExitFailed, err: fmt.Errorf("doctor: write: %w", err)}
	}
	if cfgErr != nil {
		return &exitError{code: tick.ExitCode(cfgErr), err: cfgErr}
	}
	if n := doctor.Failed(results); n > 0 {
		return &exitError{code: tick.ExitFailed, err: fmt.Errorf("doctor: %d of %d checks failed", n, len(results))}
	}
	return nil
}

// checkUserFlag refuses a --user that is no account name, or names no account, before it is
// looked up or reaches setpriv's argv (where "--reuid=0" or "-h" would be setpriv's to read).
func checkUserFlag(name string, d doctorDeps) error {
	if name == "" {
		return nil
	}
	if !config.ValidAccountName(name) {
		return fmt.Errorf("doctor: --user %q is not an account name (lowercase letters, digits, '_' and '-', starting with a letter or '_')", name)
	}
	if _, err := d.lookup(name); err != nil {
		return fmt.Errorf("doctor: --user %s: no such account: %v", name, err)
	}
	return nil
}

// fillDoctorEnv completes env: accounts, the box, and clients over the tick's transport and TLS.
func fillDoctorEnv(env *doctor.Env, opts doctorOptions, d doctorDeps) (closeFn func()) {
	cfg := env.Config
	name := opts.user
	if name == "" {
		name = d.self.Name
		if d.self.UID == 0 {
			name = cfg.AgentUser // the unit's User=
		}
	}
	env.Self, env.AgentName = d.self, name
	if a, err := d.lookup(name); err != nil {
		env.AgentErr = err
	} else {
		env.Agent = &a
	}
	env.UserName, env.GroupName, env.LookupGroup = d.userName, d.groupName, d.lookupGroup
	env.Stat, env.ReadFile = d.stat, d.readFile
	env.Runner, env.Meter, env.PluginDirs = d.runner, d.meter, d.pluginDirs
	env.Timer = func(ctx context.Context) *protocol.Timer { return d.timer(ctx, d.now()) }
	env.Hostname, env.Now = d.hostname, d.now
	env.TunnellerActive = func(ctx context.Context) (bool, error) {
		return systemd.Probe{Runner: d.runner}.UnitActive(ctx, identity.TunnellerUnit)
	}

	// The SDK's own log lines would interleave with doctor's; its faults come back as errors.
	tr, err := transport.New(transportOptions(cfg, nil))
	if err != nil {
		env.TransportErr = err
		return func() {}
	}
	hc := &http.Client{Transport: tr.HTTPTransport(), Timeout: cfg.Tenancy.Timeout()}
	env.Tenancy = tenancy.New(cfg.TenancyURL(), hc)
	env.TenancyHTTP = hc
	b, err := newBaoClient(cfg, tr, cfg.Bao.Addr)
	if err != nil {
		env.BaoErr = err
	} else {
		env.Bao = b
	}
	env.BaoAt = func(addr string) (doctor.BaoClient, error) { return newBaoClient(cfg, tr, addr) }
	return func() { _ = tr.Close() }
}
