package tick_test

import (
	"os"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bundle/bundletest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/release"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// Every bypass class of issue 10, through the whole tick: refused, nothing leased or read,
// nothing started; and the next tick, asked for the same sha, repeats the verdict without
// fetching the bundle again.
func TestEveryBypassClassIsRefusedByTheTick(t *testing.T) {
	for _, c := range bundletest.BypassClasses() {
		t.Run(c.Name, func(t *testing.T) {
			h := newHarness(t)
			spec := bundleSpec{compose: c.Compose, composeFile: c.File}
			h.desire(spec)
			h.expectExit(tick.ExitFailed)
			r := h.lastReport()
			if r.Result != protocol.ResultRefused || !strings.HasPrefix(r.Detail, c.Code+": ") || !strings.Contains(r.Detail, c.Want) {
				// the report is cut at 1000 bytes; the journal line holds the whole detail
				if r.Result != protocol.ResultRefused || !strings.HasPrefix(r.Detail, c.Code+": ") {
					t.Fatalf("report = %+v, want %s containing %q", r, c.Code, c.Want)
				}
				h.expectLog(c.Want)
			}
			if h.ten.LeasesGranted(env) != 0 || h.bao.Reads() != 0 {
				t.Errorf("leased %d, read %d before refusing", h.ten.LeasesGranted(env), h.bao.Reads())
			}
			for _, call := range h.docker.Subcommands() {
				if call != "info --format {{json .}}" {
					t.Errorf("docker ran %q for a refused bundle", call)
				}
			}
			if len(h.docker.Running()) != 0 {
				t.Errorf("running %v", h.docker.Running())
			}

			fetched := len(h.ten.BundleFetches(env))
			h.expectExit(tick.ExitFailed)
			if got := len(h.ten.BundleFetches(env)); got != fetched {
				t.Errorf("the refused sha was fetched again (%d fetches, was %d)", got, fetched)
			}
			if again := h.lastReport(); again.Result != protocol.ResultRefused || again.Detail != r.Detail {
				t.Errorf("second report = %+v, want the stored refusal %q", again, r.Detail)
			}
			h.expectLog("not fetched again")
		})
	}
}

// The dozen compose files people write each apply through the tick, both judgements included.
func TestRealWorldComposeFilesApply(t *testing.T) {
	bundletest.RealWorldFiles(t, "../bundle/testdata/compose", func(t *testing.T, compose string) {
		h := newHarness(t)
		sha := h.desire(bundleSpec{compose: compose, extra: map[string]string{"grafana.env": "GF_LOG_LEVEL=warn\n"}})
		h.expectExit(tick.ExitOK)
		if r := h.lastReport(); r.Result != protocol.ResultApplied || r.Sha != sha {
			t.Fatalf("report = %+v", r)
		}
	})
}

// The post-render judgement reads what the compose binary makes of the staged release. A
// compose that makes it privileged (here: one that reads the file otherwise than compose-go
// v2.9.1) is refused after the secrets were read and before anything is pulled or promoted;
// the detail names keys, never values, and the verdict is remembered.
func TestPostRenderJudgementRefusesBeforePull(t *testing.T) {
	h := newHarness(t)
	first := h.desire(bundleSpec{})
	h.expectExit(tick.ExitOK)

	h.docker.ConfigRewrite = func(m map[string]any) {
		api := m["services"].(map[string]any)["api"].(map[string]any)
		api["privileged"] = true
		api["volumes"] = []any{map[string]any{"type": "bind", "source": "/srv/" + dbPassword, "target": "/x"}}
	}
	second := h.desire(bundleSpec{template: defaultTemplate + "V=2\n"})
	pulls := h.docker.Count("compose pull")
	h.expectExit(tick.ExitFailed)
	r := h.lastReport()
	if r.Result != protocol.ResultRefused || !strings.HasPrefix(r.Detail, "PRIVILEGED_REFUSED: rendered: docker-compose.yml: 2 finding(s)") ||
		!strings.Contains(r.Detail, "api: privileged") || !strings.Contains(r.Detail, "api: volumes[0]: bind source outside the release directory") {
		t.Fatalf("report = %+v", r)
	}
	if strings.Contains(r.Detail, dbPassword) || strings.Contains(h.logs.String(), dbPassword) || strings.Contains(r.Detail, "/srv/") {
		t.Errorf("a rendered value leaked: %q", r.Detail)
	}
	if h.docker.Count("compose pull") != pulls {
		t.Error("pulled after the post-render refusal")
	}
	if cur, _, _ := release.Current(h.cfg.EnvDir()); cur != first {
		t.Errorf("current = %.12s, want the previous release %.12s", cur, first)
	}
	if st := h.state(); st.AppliedSha != first || st.Refused == nil || st.Refused.Sha != second {
		t.Errorf("state: applied %.12s, refused %+v", st.AppliedSha, st.Refused)
	}
	leases := h.ten.LeasesGranted(env) + h.bao.Reads()
	h.expectExit(tick.ExitFailed)
	if got := h.ten.LeasesGranted(env) + h.bao.Reads(); got != leases {
		t.Error("the remembered refusal leased or read again")
	}
	if len(h.docker.Running()) != 2 {
		t.Errorf("the previous release stopped: %v", h.docker.Running())
	}
}

// `compose config` that fails is a failure, not a verdict: reported failed with compose's own
// words (redacted), not remembered as a refusal, and tried again once its backoff is over.
func TestComposeConfigFailureIsAFailure(t *testing.T) {
	h := newHarness(t)
	h.docker.ConfigFail = "services.worker.environment: invalid value " + dbPassword
	h.desire(bundleSpec{})
	h.expectExit(tick.ExitFailed)
	r := h.lastReport()
	if r.Result != protocol.ResultFailed || !strings.Contains(r.Detail, "docker compose config failed") || strings.Contains(r.Detail, dbPassword) {
		t.Fatalf("report = %+v", r)
	}
	if st := h.state(); st.Refused != nil {
		t.Errorf("a failure was remembered as a refusal: %+v", st.Refused)
	}
	if st := h.state(); st.Backoff == nil || st.Backoff.Sha != r.Sha {
		t.Errorf("a failure did not back off: %+v", st.Backoff)
	}
	h.docker.ConfigFail = ""
	h.clock.Advance(state.FirstBackoff)
	h.expectExit(tick.ExitOK)
	if r := h.lastReport(); r.Result != protocol.ResultApplied {
		t.Errorf("after compose config works again: %+v", r)
	}
}

// A refusal remembered by another agent version is judged again: the policy may have changed.
func TestRefusalByAnotherVersionIsJudgedAgain(t *testing.T) {
	h := newHarness(t)
	h.desire(bundleSpec{compose: bundletest.Svc("    privileged: true\n")})
	h.expectExit(tick.ExitFailed)
	st := h.state()
	st.Refused.AgentVersion = "0.1.9"
	h.saveState(st)
	fetched := len(h.ten.BundleFetches(env))
	h.expectExit(tick.ExitFailed)
	if len(h.ten.BundleFetches(env)) != fetched+1 {
		t.Error("a refusal remembered by another version was not judged again")
	}
}

func (h *harness) saveState(st *state.State) {
	h.t.Helper()
	if err := state.Save(h.cfg.StatePath(), st); err != nil {
		h.t.Fatal(err)
	}
}

// A disk refusal is remembered with the free space it was judged on: while the same
// filesystems hold about as much (state.DiskSlack), the ticks repeat it without fetching the
// bundle; a move past the slack (either way), another set of filesystems, or a changed disk
// config judges it again.
func TestDiskRefusalIsJudgedAgainOnlyWhenFreeSpaceChanged(t *testing.T) {
	const mib = int64(1 << 20)
	refused := func(t *testing.T) (*harness, protocol.Report) {
		h := newHarness(t)
		if err := os.MkdirAll(h.docker.RootDir, 0o755); err != nil {
			t.Fatal(err)
		}
		h.free[h.docker.RootDir] = 32 * mib
		h.free[h.cfg.ContainerdRoot] = 32 * mib
		h.desire(bundleSpec{})
		h.expectExit(tick.ExitFailed)
		r := h.lastReport()
		if r.Result != protocol.ResultRefused || !strings.HasPrefix(r.Detail, "DISK_INSUFFICIENT: ") {
			t.Fatalf("report = %+v", r)
		}
		st := h.state()
		if st.Refused == nil || st.Refused.Code != protocol.CodeDisk || len(st.Refused.Disk) != 2 || st.Refused.Disk[0].FreeBytes != 32*mib {
			t.Fatalf("refused_sha = %+v", st.Refused)
		}
		return h, r
	}
	// tick runs one tick and says whether it fetched the bundle.
	runTick := func(h *harness, want int) bool {
		h.t.Helper()
		n := len(h.ten.BundleFetches(env))
		h.expectExit(want)
		return len(h.ten.BundleFetches(env)) != n
	}

	t.Run("same free space repeats the refusal without a fetch", func(t *testing.T) {
		h, first := refused(t)
		h.free[h.docker.RootDir] = 32*mib + 60*mib // drift inside the 64 MiB slack
		for range 2 {
			if runTick(h, tick.ExitFailed) {
				t.Fatal("the refused sha was fetched again with the free space unchanged")
			}
			if r := h.lastReport(); r.Result != protocol.ResultRefused || r.Detail != first.Detail {
				t.Errorf("repeated report = %+v, want the stored refusal", r)
			}
		}
		h.expectLog("; free space unchanged, not fetched again)")
		if h.ten.LeasesGranted(env) != 0 || h.docker.Count("compose pull") != 0 {
			t.Error("a repeated disk refusal leased or pulled")
		}
	})
	t.Run("a kit re-run forgets it: the next tick fetches and judges again", func(t *testing.T) {
		h, _ := refused(t)
		h.writeBootstrap()
		if !runTick(h, tick.ExitFailed) {
			t.Fatal("not fetched again after a kit re-run")
		}
		h.expectLog("kit re-run: disk refusal of ")
		if r := h.lastReport(); r.Result != protocol.ResultRefused || !strings.HasPrefix(r.Detail, "DISK_INSUFFICIENT: ") {
			t.Errorf("report = %+v, want a fresh disk refusal (the space is still short)", r)
		}
	})
	t.Run("free space grown past the slack is judged again and applies", func(t *testing.T) {
		h, _ := refused(t)
		h.free[h.docker.RootDir] = 500 << 30
		h.free[h.cfg.ContainerdRoot] = 500 << 30
		if !runTick(h, tick.ExitOK) {
			t.Error("not fetched again after the free space grew")
		}
		if r := h.lastReport(); r.Result != protocol.ResultApplied {
			t.Errorf("report = %+v", r)
		}
		h.expectLog("judging the refused sha again: image storage now has")
	})
	t.Run("a move of a path that is not the tightest is judged again", func(t *testing.T) {
		h, _ := refused(t)
		h.free[h.cfg.ContainerdRoot] = 500 << 30
		if !runTick(h, tick.ExitFailed) {
			t.Error("not judged again after containerd's root grew past the slack")
		}
	})
	t.Run("free space shrunk past the slack is judged again", func(t *testing.T) {
		h := newHarness(t)
		if err := os.MkdirAll(h.docker.RootDir, 0o755); err != nil {
			t.Fatal(err)
		}
		h.free[h.docker.RootDir] = 1000 * mib
		h.desire(bundleSpec{})
		h.expectExit(tick.ExitFailed)
		h.free[h.docker.RootDir] = 900 * mib // 100 MiB less: past max(10 MiB, 64 MiB)
		if !runTick(h, tick.ExitFailed) {
			t.Error("not judged again after the free space shrank past the slack")
		}
		if st := h.state(); st.Refused == nil || st.Refused.Disk[0].FreeBytes != 900*mib {
			t.Errorf("the new judgement's measure is not kept: %+v", st.Refused)
		}
		h.expectLog("judging the refused sha again: free space on ")
		if runTick(h, tick.ExitFailed) {
			t.Error("the new measure did not hold the refusal")
		}
	})
	t.Run("another set of filesystems is judged again", func(t *testing.T) {
		h, _ := refused(t)
		if err := os.Remove(h.cfg.ContainerdRoot); err != nil { // containerd's root is gone: not measured
			t.Fatal(err)
		}
		if !runTick(h, tick.ExitFailed) {
			t.Error("not judged again after the measured paths changed")
		}
		h.expectLog("judging the refused sha again: the filesystems measured changed")
		if st := h.state(); st.Refused == nil || len(st.Refused.Disk) != 1 {
			t.Errorf("refused_sha = %+v", st.Refused)
		}
	})
	t.Run("a changed disk config is judged again", func(t *testing.T) {
		h, _ := refused(t)
		h.cfg.Disk.HeadroomBytes = 16 * mib
		if !runTick(h, tick.ExitOK) {
			t.Error("not judged again after the headroom changed")
		}
		h.expectLog("judging the refused sha again: the disk config changed")
	})
	t.Run("a compose refusal is not re-measured", func(t *testing.T) {
		h := newHarness(t)
		h.desire(bundleSpec{compose: bundletest.Svc("    privileged: true\n")})
		h.expectExit(tick.ExitFailed)
		h.free[h.docker.RootDir] = 1 << 20
		if runTick(h, tick.ExitFailed) {
			t.Error("a compose refusal was fetched again")
		}
	})
}

// The host's time zone file binds read-only, through both judgements; where /etc/timezone is no
// file on the box (Debian 13 has none), docker would create it as a directory in the host's
// /etc, so that box refuses the bind before anything is leased.
func TestTimezoneBindsFollowTheHost(t *testing.T) {
	compose := bundletest.Svc("    volumes: [\"/etc/localtime:/etc/localtime:ro\", \"/etc/timezone:/etc/timezone:ro\"]\n")
	h := newHarness(t)
	h.desire(bundleSpec{compose: compose})
	h.expectExit(tick.ExitOK)
	if r := h.lastReport(); r.Result != protocol.ResultApplied {
		t.Fatalf("with both files on the host: %+v", r)
	}

	h = newHarness(t)
	h.noHostFile = map[string]bool{"/etc/timezone": true}
	h.desire(bundleSpec{compose: compose})
	h.expectExit(tick.ExitFailed)
	r := h.lastReport()
	if r.Result != protocol.ResultRefused || !strings.Contains(r.Detail, "PRIVILEGED_REFUSED: docker-compose.yml: 1 finding(s)") ||
		!strings.Contains(r.Detail, "api: volumes[1]: not a file on this host") {
		t.Fatalf("without /etc/timezone: %+v", r)
	}
	if h.ten.LeasesGranted(env) != 0 {
		t.Error("leased for a refused bundle")
	}
}
