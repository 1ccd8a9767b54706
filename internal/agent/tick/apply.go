package tick

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bundle"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/compose"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/diskspace"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/registryauth"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/release"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/version"
)

// kvReadLimit bounds concurrent OpenBao reads per apply: 20 secrets in two round trips, no flood.
const kvReadLimit = 16

// apply runs PROTOCOL steps 5-7: every refusal check before any lease or read, then the rest.
func (a *Agent) apply(ctx context.Context, resp *protocol.CheckinResponse) error {
	sha := resp.DesiredSha
	log := a.log.With("sha", protocol.ShortSha(sha))
	if r, ok := a.st.RefusedFor(sha, version.Version); ok {
		why := a.refusalLapsed(r)
		if why == "" {
			return a.repeatRefusal(ctx, r)
		}
		log.Info("judging the refused sha again: " + why)
	}
	at := &applyAttempt{sha: sha}
	a.attempt = at
	defer func() { a.attempt = nil }()

	var files map[string]string
	var headerSha string
	err := a.tok.WithAuth(ctx, "tenancy: bundle", func(tok secret.Value) error {
		var err error
		files, headerSha, err = a.deps.Tenancy.Bundle(ctx, tok, resp.BundleURL)
		return err
	})
	if err != nil {
		// A body that is no bundle at all is refused like any other invalid bundle.
		return a.refuseOrFail(ctx, sha, err)
	}
	if err := a.step("bundle"); err != nil {
		return err
	}

	b, paths, err := a.checkBundle(ctx, files, sha)
	if err != nil {
		return a.refuseOrFail(ctx, sha, err)
	}
	at.b = b
	if headerSha != "" && headerSha != b.Sha {
		log.Warn("bundle header sha disagrees with its content", "header", protocol.ShortSha(headerSha), "content", protocol.ShortSha(b.Sha))
	}
	if err := a.step("checks"); err != nil {
		return err
	}

	values, err := a.readSecrets(ctx, b, paths)
	if err != nil {
		return a.refuseOrFail(ctx, sha, err)
	}
	if err := a.step("secrets"); err != nil {
		return err
	}

	envText, err := bundle.RenderEnv(b.EnvTemplate, values)
	if err != nil {
		return a.refuseOrFail(ctx, sha, err)
	}
	dir, distrusted, err := release.Stage(a.cfg.EnvDir(), sha, b.Files, envText)
	if distrusted != nil {
		// The old copy is gone, and with it anything the app had written into it.
		log.Warn("existing release directory was not as the agent staged it; replaced with a fresh copy, app data in it is lost",
			"dir", release.Dir(a.cfg.EnvDir(), sha), "why", distrusted.Error())
	}
	if err != nil {
		return a.fail(ctx, sha, protocol.FailStage, err.Error(), "")
	}
	if err := a.step("stage"); err != nil {
		return err
	}
	if err := a.judgeRendered(ctx, b, dir); err != nil {
		return a.refuseOrFail(ctx, sha, err)
	}
	if err := a.step("judged"); err != nil {
		return err
	}
	at.promoted = true // a failed rename may still have swapped the link
	if err := release.Promote(a.cfg.EnvDir(), sha); err != nil {
		return a.fail(ctx, sha, protocol.FailStage, err.Error(), "")
	}
	log.Info("promoted release " + protocol.ShortSha(sha) + " → " + dir)
	if err := a.step("promote"); err != nil {
		return err
	}

	return a.runCompose(ctx, b, dir)
}

// checkBundle validates the bundle and runs every secret-free refusal check, so nothing is
// leased or read for an unrunnable bundle. It returns the resolved KV paths, one per entry.
func (a *Agent) checkBundle(ctx context.Context, files map[string]string, sha string) (*bundle.Bundle, []string, error) {
	b, err := bundle.Parse(files, sha)
	if err != nil {
		return nil, nil, err
	}
	releaseDir := filepath.Join(a.cfg.EnvDir(), "releases", sha)
	checkErr := b.Check(releaseDir, a.cfg.ComposeProject, a.judgeHost())
	var r *protocol.Refusal
	if checkErr != nil && !(errors.As(checkErr, &r) && r.Code == protocol.CodePrivileged) {
		a.rememberRefusal(sha, checkErr)
		return nil, nil, checkErr // BUNDLE_INVALID: a build, a path outside the release
	}
	paths, err := b.ResolveManifest(a.vault.Prefix)
	if err != nil {
		return nil, nil, err
	}
	if checkErr != nil {
		a.rememberRefusal(sha, checkErr)
		return nil, nil, checkErr // PRIVILEGED_REFUSED
	}
	if err := checkEnvComplete(b); err != nil {
		return nil, nil, err
	}
	if a.st.IsRollback(sha) && !b.Meta.Agent.AllowRollback {
		return nil, nil, protocol.Refuse(protocol.CodeRollback, "%s was applied before and is not the running release; bundle.json agent.allow_rollback is not set", protocol.ShortSha(sha))
	}
	return b, paths, a.checkDisk(ctx, b)
}

// checkEnvComplete renders with stand-ins for manifest variables: ENV_INCOMPLETE before any lease.
func checkEnvComplete(b *bundle.Bundle) error {
	stand := map[string]secret.Value{}
	for _, e := range b.EnvEntries() {
		stand[e.Var] = secret.New("x")
	}
	_, err := bundle.RenderEnv(b.EnvTemplate, stand)
	var r *protocol.Refusal
	if errors.As(err, &r) && r.Code == protocol.CodeEnvIncomplete {
		return r
	}
	return nil
}

// checkDisk refuses a bundle the image storage cannot hold (data-root and containerd's root, on
// different disks on env-dev-08); a full box otherwise died mid-pull looking like a registry fault.
func (a *Agent) checkDisk(ctx context.Context, b *bundle.Bundle) error {
	if !a.dockerInfoFresh {
		info, err := a.deps.Docker.Info(ctx)
		if err != nil {
			return err
		}
		a.noteDockerInfo(info)
	}
	free, measured, err := a.deps.Disk.Tightest(a.cfg.StoragePaths(a.st.DockerRootDir))
	if err != nil {
		return fmt.Errorf("disk: %w", err)
	}
	need := b.Meta.Agent.DiskNeedBytes
	required := a.diskRequired(need)
	if free >= required {
		return nil
	}
	var sized string
	if need > 0 {
		sized = fmt.Sprintf("bundle needs %d MiB (%d MiB × %g + %d MiB headroom)", mib(required), mib(need), a.cfg.Disk.Factor, mib(a.cfg.Disk.HeadroomBytes))
	} else {
		sized = fmt.Sprintf("a pull needs at least %d MiB headroom (bundle declares no size)", mib(required))
	}
	refusal := protocol.Refuse(protocol.CodeDisk, "image storage (%s) has %d MiB free, %s", describe(measured), mib(free), sized)
	a.rememberRefusal(b.Sha, refusal)
	a.st.Refused.Disk, a.st.Refused.RequiredBytes, a.st.Refused.NeedBytes = diskFrees(measured), required, max(need, 0)
	return refusal
}

// diskRequired is the free space needed; sizes ≥ 4 EiB saturate so the sum cannot wrap.
func (a *Agent) diskRequired(need int64) int64 {
	const huge = 1 << 62
	if need <= 0 {
		return a.cfg.Disk.HeadroomBytes
	}
	scaled := float64(need) * a.cfg.Disk.Factor
	if !(scaled < huge) || a.cfg.Disk.HeadroomBytes >= huge {
		return math.MaxInt64
	}
	return int64(scaled) + a.cfg.Disk.HeadroomBytes
}

func diskFrees(ms []diskspace.Measure) []state.DiskFree {
	out := make([]state.DiskFree, len(ms))
	for i, m := range ms {
		out[i] = state.DiskFree{Path: m.Path, FreeBytes: m.Free}
	}
	return out
}

func describe(ms []diskspace.Measure) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = fmt.Sprintf("%s: %d MiB", m.Path, mib(m.Free))
	}
	return strings.Join(parts, ", ")
}

func mib(n int64) int64 { return n / (1 << 20) }

// readSecrets gets a token and reads every entry concurrently. The registry credential goes to the
// agent's DOCKER_CONFIG, never .env (containers see it) nor ~/.docker (env-dev-01, seed 0.1.7).
func (a *Agent) readSecrets(ctx context.Context, b *bundle.Bundle, paths []string) (map[string]secret.Value, error) {
	if len(b.Entries) == 0 {
		return map[string]secret.Value{}, nil
	}
	tok, err := a.tok.ForApply(ctx)
	if err != nil {
		return nil, err
	}
	if err := a.step("lease"); err != nil {
		return nil, err
	}
	reqs := make([]bao.KVRequest, len(b.Entries))
	for i, e := range b.Entries {
		reqs[i] = bao.KVRequest{Name: e.Var, Path: paths[i], Version: e.Version, Key: e.Key}
		if e.Use == bundle.UseRegistryAuth {
			reqs[i].Name = registryName
		}
	}
	// The token reads at the OpenBao that minted it (a lease's addr may differ from the tick's).
	client, err := a.deps.NewBao(a.tok.Addr())
	if err != nil {
		return nil, err
	}
	got, err := client.ReadMany(ctx, tok, a.vault.Mount, reqs, kvReadLimit)
	for _, v := range got {
		a.redact.Add(v.Reveal())
	}
	if err != nil {
		if isTemporary(err) {
			return nil, a.classify("bao: read", err)
		}
		return nil, err
	}
	values := map[string]secret.Value{}
	var names []string
	for _, e := range b.EnvEntries() {
		values[e.Var] = got[e.Var]
		names = append(names, e.Var)
	}
	sort.Strings(names)
	suffix := ""
	if cred, ok := got[registryName]; ok {
		suffix = " (+ registry credential)"
		if err := a.writeRegistryAuth(cred); err != nil {
			return nil, err
		}
	}
	a.log.Info(fmt.Sprintf("read %d secret(s): %s%s", len(b.Entries), strings.Join(names, ", "), suffix))
	return values, nil
}

// registryName keys the registry credential; env var names ([A-Za-z_][A-Za-z0-9_]*) cannot clash.
const registryName = "registry-auth"

func (a *Agent) writeRegistryAuth(cred secret.Value) error {
	auth, err := registryauth.Parse(cred, a.cfg.RegistryHost)
	if err != nil {
		// The pull will fail in the registry's own words, which say it better; note why in the journal.
		a.log.Warn("registry credential unusable; private images will not pull", "error", err.Error())
		return nil
	}
	// The base64 form is the agent's own making: no redactor could guess it from the password.
	a.redact.Add(auth.Password.Reveal(), auth.Encoded().Reveal())
	if err := registryauth.WriteDockerConfig(a.cfg.DockerConfigDir(), auth); err != nil {
		return err
	}
	a.log.Info("registry credential in place", "registry", auth.Registry, "docker_config", a.cfg.DockerConfigDir())
	return nil
}

// runCompose pulls, starts and waits; only a healthy project becomes the applied sha.
func (a *Agent) runCompose(ctx context.Context, b *bundle.Bundle, dir string) error {
	sha, file := b.Sha, b.Meta.ComposeFile
	d := a.deps.Docker
	a.log.Info("compose pull", "policy", b.Meta.Pull)
	if err := d.Pull(ctx, dir, file, b.Meta.Pull); err != nil {
		return a.fail(ctx, sha, protocol.FailPull, "compose pull: "+err.Error(), outputOf(err))
	}
	if err := a.step("pull"); err != nil {
		return err
	}
	// Saved before `up` for finishKilledApply; a failed save does not stop the apply.
	a.st.Applying = &state.ApplyInProgress{Sha: sha, StartedAt: a.deps.Now().UTC(), AutoRevert: b.Meta.Agent.AutoRevert}
	_ = a.saveState()
	if err := a.step("applying"); err != nil {
		return err
	}
	a.log.Info("compose up -d --remove-orphans")
	if err := d.Up(ctx, dir, file); err != nil {
		return a.fail(ctx, sha, protocol.FailUp, "compose up: "+err.Error(), a.logsTail(ctx, dir, file))
	}
	if err := a.step("up"); err != nil {
		return err
	}
	timeout := time.Duration(a.cfg.HealthyTimeoutS) * time.Second
	if b.Meta.Agent.HealthyTimeoutS > 0 {
		timeout = time.Duration(b.Meta.Agent.HealthyTimeoutS) * time.Second
	}
	ok, cs, err := d.WaitHealthy(ctx, dir, file, timeout, a.deps.Sleep)
	if err != nil && !ok {
		return a.fail(ctx, sha, protocol.FailHealthWait, "waiting for health: "+err.Error(), a.logsTail(ctx, dir, file))
	}
	if !ok {
		detail := fmt.Sprintf("not healthy after %s: %s", timeout, strings.Join(compose.Unready(cs), ", "))
		return a.failWith(ctx, sha, protocol.FailUnhealthy, detail, a.logsTail(ctx, dir, file), cs)
	}
	if err := a.step("healthy"); err != nil {
		return err
	}

	a.st.Applying = nil
	a.st.AppliedSha = sha
	a.st.AppliedFiles = &state.ReleaseFiles{Sha: sha, Files: slices.Sorted(maps.Keys(b.Files))}
	a.learnRelease(sha, cs, b.Meta.Agent.DriftCorrection)
	a.st.AddHistory(sha)
	a.st.LastSha = sha
	a.st.LastResult = protocol.ResultApplied
	a.st.LastDetail = ""
	a.st.Backoff = nil // the sha that was failing (this one or another) no longer is
	a.clearFailure(protocol.ShortSha(sha) + " applied")
	now := a.deps.Now().UTC()
	a.st.LastApplyAt = &now
	a.st.CountOutcome(protocol.ResultApplied)
	// Not saved (full disk): the report says applied with the write error, exit 1; the next tick
	// re-applies the same release, no rollback refusal since history never recorded it.
	_ = a.saveState()
	if err := a.step("state"); err != nil {
		return err
	}
	a.log.Info("applied " + protocol.ShortSha(sha))
	a.report(ctx, protocol.Report{Sha: sha, Result: protocol.ResultApplied, Containers: cs})
	a.pruneReleases()
	if a.opt.Prune {
		if err := a.deps.Docker.ImagePrune(ctx); err != nil {
			a.log.Warn("image prune failed", "error", a.redact.Redact(err.Error()))
		}
	}
	return nil
}

// pruneReleases keeps the running release and the one before it: each release's .env holds the
// secrets of its day, and old copies of rotated secrets must not pile up.
func (a *Agent) pruneReleases() {
	var keep []string
	if n := len(a.st.History); n >= 2 {
		keep = append(keep, a.st.History[n-2])
	}
	removed, err := release.Prune(a.cfg.EnvDir(), append(keep, a.st.AppliedSha))
	if err != nil {
		a.log.Warn("release prune failed", "error", err.Error())
	}
	if len(removed) > 0 {
		a.log.Info("pruned old releases", "removed", strings.Join(removed, ","))
	}
}

func (a *Agent) logsTail(ctx context.Context, dir, file string) string {
	out, err := a.deps.Docker.Logs(ctx, dir, file, 50)
	if err != nil {
		return "compose logs failed: " + err.Error()
	}
	return out
}

func outputOf(err error) string {
	var ce *compose.CmdError
	if errors.As(err, &ce) {
		return ce.Output
	}
	return ""
}
