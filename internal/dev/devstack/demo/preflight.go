package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/diskspace"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/doctor"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
)

// Preflight runs `monky-deployd doctor`'s docker and compose checks as the demo's agents will
// run docker — as this user, with a DOCKER_CONFIG of their own under dir and the agents' explicit
// environment (no DOCKER_HOST: the engine is the docker CLI's default) — and prints their lines to w. An engine that answers without a usable compose v2
// is an error naming the fix: the demo would run for minutes and deploy nothing. No engine is
// no error: the demo then runs without one and says so. It builds, starts and writes nothing
// but dir's DOCKER_CONFIG directory.
func Preflight(ctx context.Context, dir string, w io.Writer) (engine bool, err error) {
	stateDir := filepath.Join(dir, "preflight")
	cfgText := fmt.Sprintf("env_id: env-demo-preflight\nstate_dir: %s\n", stateDir)
	cfg, err := config.Parse([]byte(cfgText), filepath.Join(stateDir, "config.yaml"))
	if err != nil {
		return false, fmt.Errorf("%w: preflight config: %v", errDemo, err)
	}
	defer os.RemoveAll(stateDir)
	self := doctor.CurrentAccount()
	env := &doctor.Env{
		ConfigPath: cfg.Path, Config: cfg, Self: self, AgentName: self.Name,
		UserName: doctor.UserName, GroupName: doctor.GroupName, LookupGroup: doctor.LookupGroup,
		Stat: doctor.OSStat, ReadFile: os.ReadFile, Runner: runner.Exec{}, Meter: diskspace.Meter{},
		ShellDocker: true,
	}
	if a, err := doctor.LookupAccount(self.Name); err == nil {
		env.Agent = &a
	} else {
		env.AgentErr = err
	}
	results, _ := doctor.Run(ctx, doctor.Only(doctor.Checks(env), "docker", "compose"))
	var buf strings.Builder
	if err := doctor.Print(&buf, results); err != nil {
		return false, err
	}
	for _, l := range strings.Split(strings.TrimRight(buf.String(), "\n"), "\n") {
		fmt.Fprintf(w, "   %s\n", l)
	}
	byName := map[string]doctor.Result{}
	for _, r := range results {
		byName[r.Name] = r
	}
	if byName["docker"].Status != doctor.OK {
		fmt.Fprintln(w, "   no usable docker engine: the demo runs without one, and its agents report that they cannot deploy")
		return false, nil
	}
	if c := byName["compose"]; c.Status != doctor.OK {
		return true, fmt.Errorf("%w: the docker engine answers, but docker compose v2 does not: %s — fix: %s", errDemo, c.Detail, c.Fix)
	}
	return true, nil
}
