// Package compose drives docker through the CLI named by docker_bin, never the socket: one binary
// and one DOCKER_CONFIG govern every call, and an operator can re-run it by hand.
package compose

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/clip"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// ErrNoConfigDir is returned, before anything runs, by a Docker without a ConfigDir.
var ErrNoConfigDir = errors.New("compose: no DOCKER_CONFIG directory configured")

// ErrNoRedactor is returned, before anything runs, by a Docker without a Redact: a failed
// command's output may quote a secret, and is cut for a report only once it is redacted.
var ErrNoRedactor = errors.New("compose: no redactor configured")

// DefaultPollInterval is how often WaitHealthy looks at the project when PollInterval is 0.
const DefaultPollInterval = 2 * time.Second

// DefaultPsTimeout bounds one `compose ps` when PsTimeout is 0. It answers in well under a
// second; one that has not answered in a minute met an engine that hangs. Unbounded, it held a
// converged tick until systemd's timeout (an hour) with no report, and the timer started no
// other tick meanwhile.
const DefaultPsTimeout = time.Minute

// ErrNoAnswer is a docker command that did not answer within its bound (Ps): the engine hangs.
var ErrNoAnswer = errors.New("no answer")

// Docker runs docker commands for one compose project.
type Docker struct {
	Bin string // docker CLI (config docker_bin); "" means "docker"
	// ConfigDir is DOCKER_CONFIG, set on EVERY call (seed 0.1.7): a human's `docker login` must not
	// make the agent's pulls work or fail.
	ConfigDir string
	Project   string        // compose project name (config compose_project)
	Runner    runner.Runner // runs the CLI
	Now       func() time.Time
	// PollInterval is the pause between two looks in WaitHealthy; 0 means DefaultPollInterval.
	PollInterval time.Duration
	// PsTimeout bounds one `compose ps` (a look of WaitHealthy gets what is left of the wait if
	// that is more); 0 means DefaultPsTimeout.
	PsTimeout time.Duration
	// Redact masks every secret the tick has read (it is the tick's own, so values added later
	// count): a failed command's output is redacted before anything cuts it (CmdError).
	Redact *secret.Redactor
	// Environ is the agent's environment, of which docker gets only PassedEnv (nil: the
	// process's own).
	Environ []string
}

// Info is what the agent needs of `docker info`; empty fields fall back (root dir /var/lib/docker).
type Info struct {
	DockerRootDir string
	ServerVersion string
}

// Info runs `docker info --format '{{json .}}'`.
func (d *Docker) Info(ctx context.Context) (Info, error) {
	res, err := d.run(ctx, "docker info", "", "info", "--format", "{{json .}}")
	if err != nil {
		return Info{}, err
	}
	return ParseInfo(res.Stdout)
}

// ComposeVersion returns `docker compose version --short` without a leading "v".
func (d *Docker) ComposeVersion(ctx context.Context) (string, error) {
	res, err := d.run(ctx, "docker compose version", "", "compose", "version", "--short")
	if err != nil {
		return "", err
	}
	v := strings.TrimPrefix(strings.TrimSpace(string(res.Stdout)), "v")
	if v == "" || strings.ContainsAny(v, " \n\t") {
		return "", fmt.Errorf("compose: docker compose version: unexpected output %q", clip.Head(string(res.Stdout), 80))
	}
	return v, nil
}

// Pull pulls the images; policy "always" (or "") pulls all, "missing" only absent ones.
func (d *Docker) Pull(ctx context.Context, dir, composeFile, policy string) error {
	args, err := d.fileArgs(dir, composeFile)
	if err != nil {
		return err
	}
	args = append(args, "pull")
	switch policy {
	case "", "always":
	case "missing":
		args = append(args, "--policy", "missing")
	default:
		return fmt.Errorf("compose: pull: unknown policy %q (want always or missing)", policy)
	}
	_, err = d.run(ctx, "docker compose pull", "", args...)
	return err
}

// Config runs `config --format json --profile '*'`, the project as this binary will run it, for
// the post-render judgement. The output holds secrets; a failure's error carries stderr alone.
func (d *Docker) Config(ctx context.Context, dir, composeFile string) ([]byte, error) {
	args, err := d.fileArgs(dir, composeFile)
	if err != nil {
		return nil, err
	}
	res, err := d.run(ctx, "docker compose config", "", append(args, "--profile", "*", "config", "--format", "json")...)
	if err != nil {
		var ce *CmdError
		if errors.As(err, &ce) {
			ce.Output = d.Redact.Redact(ansi.ReplaceAllString(strings.TrimRight(string(res.Stderr), "\n"), ""))
		}
		return nil, err
	}
	return res.Stdout, nil
}

// Up runs `up -d --remove-orphans`: services dropped from the bundle must not keep running.
func (d *Docker) Up(ctx context.Context, dir, composeFile string) error {
	args, err := d.fileArgs(dir, composeFile)
	if err != nil {
		return err
	}
	_, err = d.run(ctx, "docker compose up", "", append(args, "up", "-d", "--remove-orphans")...)
	return err
}

// Ps lists every container, exited ones included (a heartbeat must see them); dir "" finds by name.
func (d *Docker) Ps(ctx context.Context, dir, composeFile string) ([]protocol.Container, error) {
	return d.ps(ctx, dir, composeFile, d.psTimeout())
}

func (d *Docker) psTimeout() time.Duration {
	if d.PsTimeout <= 0 {
		return DefaultPsTimeout
	}
	return d.PsTimeout
}

// ps is Ps killed after timeout without an answer (ErrNoAnswer).
func (d *Docker) ps(ctx context.Context, dir, composeFile string, timeout time.Duration) ([]protocol.Container, error) {
	args, workDir, err := d.optionalFileArgs(dir, composeFile)
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	res, err := d.run(pctx, "docker compose ps", workDir, append(args, "ps", "-a", "--format", "json")...)
	if err != nil && ctx.Err() == nil && errors.Is(pctx.Err(), context.DeadlineExceeded) {
		if timeout >= time.Second {
			timeout = timeout.Round(time.Second) // what is left of a health wait: "4m58s"
		}
		return nil, fmt.Errorf("compose: docker compose ps: %w in %s, stopped: the docker engine does not answer (systemctl status docker)", ErrNoAnswer, timeout)
	}
	if err != nil {
		return nil, err
	}
	return ParsePs(res.Stdout)
}

// Logs returns the last tail lines of every service (tail <= 0: all) plus stderr; may hold secrets.
func (d *Docker) Logs(ctx context.Context, dir, composeFile string, tail int) (string, error) {
	args, workDir, err := d.optionalFileArgs(dir, composeFile)
	if err != nil {
		return "", err
	}
	n := "all"
	if tail > 0 {
		n = strconv.Itoa(tail)
	}
	res, err := d.run(ctx, "docker compose logs", workDir, append(args, "logs", "--no-color", "--tail", n)...)
	if err != nil {
		return "", err
	}
	return string(res.Stdout) + string(res.Stderr), nil
}

// Down removes the project's containers and networks (and volumes); without the compose file it
// runs by project name alone, so a retire never depends on files.
func (d *Docker) Down(ctx context.Context, dir, composeFile string, volumes bool) error {
	args := d.projectArgs()
	workDir := "/"
	if dir != "" && composeFile != "" {
		if _, err := os.Stat(filepath.Join(dir, composeFile)); err == nil {
			if args, err = d.fileArgs(dir, composeFile); err != nil {
				return err
			}
			workDir = ""
		}
	}
	args = append(args, "down", "--remove-orphans")
	if volumes {
		args = append(args, "-v")
	}
	_, err := d.run(ctx, "docker compose down", workDir, args...)
	return err
}

// ImagePrune removes dangling images only; tagged ones stay so a rollback need not pull.
func (d *Docker) ImagePrune(ctx context.Context) error {
	_, err := d.run(ctx, "docker image prune", "", "image", "prune", "-f")
	return err
}

// WaitHealthy polls Ps until every container is Ready or timeout passes on d.Now's clock, and
// returns whether it did and the last containers seen. sleep nil is a real ctx-aware sleep. A
// failed `ps`, or one that did not answer (ErrNoAnswer), is "not ready yet"; its error returns
// only if the last look failed, ctx ended, or the CLI cannot start. A look may take what is
// left of the wait, and never less than PsTimeout: the wait has its own bound,
// and a slow engine's answer that comes within it counts (a minute's bound on each look failed,
// and reverted, a release that was healthy when the engine took a minute and more to say so).
func (d *Docker) WaitHealthy(ctx context.Context, dir, composeFile string, timeout time.Duration, sleep func(context.Context, time.Duration) error) (bool, []protocol.Container, error) {
	if sleep == nil {
		sleep = sleepCtx
	}
	interval := d.PollInterval
	if interval <= 0 {
		interval = DefaultPollInterval
	}
	deadline := d.now().Add(timeout)
	var last []protocol.Container
	for {
		cs, err := d.ps(ctx, dir, composeFile, max(d.psTimeout(), deadline.Sub(d.now())))
		var cmdErr *CmdError
		switch {
		case err == nil:
			last = cs
			if AllReady(cs) {
				return true, cs, nil
			}
		case ctx.Err() != nil || (!errors.As(err, &cmdErr) && !errors.Is(err, ErrNoAnswer)):
			return false, last, err
		}
		left := deadline.Sub(d.now())
		if left <= 0 {
			return false, last, err
		}
		if serr := sleep(ctx, min(interval, left)); serr != nil {
			return false, last, fmt.Errorf("compose: wait for healthy: %w", serr)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (d *Docker) now() time.Time {
	if d.Now != nil {
		return d.Now()
	}
	return time.Now()
}

// Ready: running and, with a healthcheck, healthy (as `compose up --wait` counts).
func Ready(c protocol.Container) bool {
	return c.State == "running" && (c.Health == "" || c.Health == "healthy")
}

// AllReady: at least one container, every one Ready (an `up` that started nothing deployed nothing).
func AllReady(cs []protocol.Container) bool {
	if len(cs) == 0 {
		return false
	}
	for _, c := range cs {
		if !Ready(c) {
			return false
		}
	}
	return true
}

// Unready lists what keeps cs from being ready, `service: state/health` (or `service: state`)
// each, in order; no containers gives "no containers".
func Unready(cs []protocol.Container) []string {
	if len(cs) == 0 {
		return []string{"no containers"}
	}
	var out []string
	for _, c := range cs {
		if Ready(c) {
			continue
		}
		who := c.Service
		if who == "" {
			who = c.Name
		}
		what := c.State
		if c.Health != "" {
			what += "/" + c.Health
		}
		out = append(out, who+": "+what)
	}
	return out
}

func (d *Docker) projectArgs() []string {
	return []string{"compose", "-p", d.Project}
}

// fileArgs is `compose -p P --project-directory DIR -f DIR/FILE`; DIR also decides which .env is read.
func (d *Docker) fileArgs(dir, composeFile string) ([]string, error) {
	if dir == "" {
		return nil, errors.New("compose: no release directory given")
	}
	// Defence in depth: compose_file was validated, but must never point outside the release.
	if composeFile == "" || !filepath.IsLocal(composeFile) || strings.Contains(composeFile, `\`) {
		return nil, fmt.Errorf("compose: compose file %q is not a relative path inside the release", composeFile)
	}
	return append(d.projectArgs(), "--project-directory", dir, "-f", filepath.Join(dir, composeFile)), nil
}

// optionalFileArgs is fileArgs, or without dir the project name alone, run from "/" (no stray file).
func (d *Docker) optionalFileArgs(dir, composeFile string) ([]string, string, error) {
	if dir == "" {
		return d.projectArgs(), "/", nil
	}
	args, err := d.fileArgs(dir, composeFile)
	return args, "", err
}

// PassedEnv reports whether docker gets the agent's variable key: the search path (credential
// helpers, plugins' own children), HOME (compose expands `~` with it; the CLI's own files are
// under DOCKER_CONFIG whatever it says), the locale and time zone. Nothing else: an operator's
// COMPOSE_FILE, COMPOSE_PROFILES, COMPOSE_ENV_FILES or COMPOSE_PROJECT_NAME would change which
// files and services a tick runs, DOCKER_HOST or DOCKER_CONTEXT which engine, DOCKER_CONFIG
// whose credentials. No proxy variable either: the engine pulls, with its own proxy settings,
// and the CLI only talks to the engine's local socket.
func PassedEnv(key string) bool {
	switch key {
	case "PATH", "HOME", "LANG", "LANGUAGE", "TZ":
		return true
	}
	return strings.HasPrefix(key, "LC_")
}

// defaultPath is docker's search path when the agent has none (systemd always sets one).
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// Env is the whole environment of every docker call: the agent's PassedEnv variables, its
// DOCKER_CONFIG, and compose told never to ask a question.
func (d *Docker) Env() []string {
	environ := d.Environ
	if environ == nil {
		environ = os.Environ()
	}
	var env []string
	path := false
	for _, kv := range environ {
		k, _, ok := strings.Cut(kv, "=")
		if ok && PassedEnv(k) {
			env = append(env, kv)
			path = path || k == "PATH"
		}
	}
	if !path {
		env = append(env, "PATH="+defaultPath)
	}
	return append(env,
		"DOCKER_CONFIG="+d.ConfigDir,
		// compose must never stop to ask a question: there is nobody at the terminal.
		"COMPOSE_INTERACTIVE_NO_CLI=1",
	)
}

// Command is a docker call with args as every call of d runs: docker_bin, Env and nothing else
// of the agent's environment.
func (d *Docker) Command(args ...string) runner.Cmd {
	bin := d.Bin
	if bin == "" {
		bin = "docker"
	}
	return runner.Cmd{Name: bin, Args: args, Env: d.Env(), OnlyEnv: true}
}

func (d *Docker) run(ctx context.Context, op, workDir string, args ...string) (runner.Result, error) {
	switch {
	case d.ConfigDir == "":
		return runner.Result{}, ErrNoConfigDir
	case d.Redact == nil:
		return runner.Result{}, ErrNoRedactor
	}
	if len(args) > 0 && args[0] == "compose" && d.Project == "" {
		return runner.Result{}, fmt.Errorf("compose: %s: no compose project name configured", op)
	}
	cmd := d.Command(args...)
	cmd.Dir = workDir
	res, err := d.Runner.Run(ctx, cmd)
	if err != nil {
		return res, fmt.Errorf("compose: %s: %w", op, err)
	}
	if res.ExitCode != 0 {
		return res, newCmdError(op, res, d.Redact)
	}
	return res, nil
}
