package devstack

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
)

// script writes an executable shell script standing in for a binary.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func newTestStack(t *testing.T) *Stack {
	t.Helper()
	s, err := Start(context.Background(), Options{Dir: t.TempDir(), CheckinInterval: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestBoxConfigIsOneTheAgentLoads(t *testing.T) {
	s := newTestStack(t)
	dir := filepath.Join(t.TempDir(), "box")
	b, err := s.NewBox(BoxOptions{Env: "env-x-01", Bin: "/bin/true", Dir: dir, Interval: 2 * time.Second,
		RegistryHost: "127.0.0.1:5000", BootstrapFile: "/kits/env-x-01/bootstrap.jwt"})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(b.ConfigPath) // the agent's own strict loader
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		what      string
		got, want any
	}{
		{"env", cfg.EnvID, "env-x-01"},
		{"transport", cfg.Transport, "system"},
		{"tenancy", cfg.TenancyURL(), s.Tenancy.URL},
		{"openbao", cfg.BaoURL(), s.Bao.Addr()},
		{"interval", cfg.IntervalS, 2},
		{"state dir", cfg.StateDir, filepath.Join(dir, "state")},
		{"bootstrap", cfg.BootstrapFile, "/kits/env-x-01/bootstrap.jwt"},
		{"project", cfg.ComposeProject, "monky-env-x-01"},
		{"registry", cfg.RegistryHost, "127.0.0.1:5000"},
		{"prod", cfg.IsProd(), false},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("%s: %v, want %v", c.what, c.got, c.want)
		}
	}
	if _, err := os.Stat(cfg.Bao.CAFile); !os.IsNotExist(err) {
		t.Errorf("bao.ca_file %s exists: %v", cfg.Bao.CAFile, err)
	}
	if _, err := s.NewBox(BoxOptions{Env: "env-x-02"}); err == nil {
		t.Error("a box without a binary and a directory")
	}
}

func TestBoxTicksAndStops(t *testing.T) {
	s := newTestStack(t)
	b, err := s.NewBox(BoxOptions{Env: "env-t-01", Dir: filepath.Join(t.TempDir(), "box"), Interval: time.Second,
		Bin: script(t, `echo "INFO checkin home=$HOME config=$2 cmd=$3 env=${MONKY_DEPLOYD_CONFIG:-unset}"; exit 3`)})
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("MONKY_DEPLOYD_CONFIG", "/etc/elsewhere.yaml")
	ctx := context.Background()

	t.Run("one tick", func(t *testing.T) {
		tk, err := b.Tick(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := "INFO checkin home=" + filepath.Join(b.Dir, "home") + " config=" + b.ConfigPath + " cmd=tick env=unset\n"
		if tk.Exit != 3 || tk.Output != want {
			t.Fatalf("tick = exit %d %q, want 3 %q", tk.Exit, tk.Output, want)
		}
		if j := b.Journal(); !strings.HasPrefix(j, "--- tick 1 ") || !strings.Contains(j, "exit 3") || !strings.HasSuffix(j, want) {
			t.Errorf("journal = %q", j)
		}
	})

	t.Run("ticking until stopped, then an upgrade", func(t *testing.T) {
		b.Start(ctx)
		b.Start(ctx) // a second Start does nothing
		poll := time.NewTicker(20 * time.Millisecond)
		defer poll.Stop()
		for len(b.Ticks()) < 3 {
			<-poll.C
		}
		b.Stop()
		n := len(b.Ticks())
		if b.Ticking() {
			t.Fatal("still ticking after Stop")
		}
		b.Stop() // stopping a stopped box does nothing
		b.SetBin(script(t, "exit 0"))
		tk, _ := b.Tick(ctx)
		if got := b.Ticks(); len(got) != n+1 || tk.Exit != 0 || got[n].Bin != b.Bin() {
			t.Errorf("after Stop and SetBin: %d ticks (want %d), last %+v", len(got), n+1, tk)
		}
	})

	t.Run("a binary that cannot run", func(t *testing.T) {
		b.SetBin(filepath.Join(t.TempDir(), "absent"))
		if _, err := b.Tick(ctx); err == nil || !strings.Contains(err.Error(), "env-t-01") {
			t.Errorf("err = %v", err)
		}
	})

	t.Run("ending ctx interrupts a running tick", func(t *testing.T) {
		marker := filepath.Join(t.TempDir(), "running")
		b.SetBin(script(t, `trap 'exit 143' TERM; touch `+marker+`; while :; do sleep 0.05; done`))
		cctx, cancel := context.WithCancel(ctx)
		n := len(b.Ticks())
		b.Start(cctx)
		poll := time.NewTicker(20 * time.Millisecond)
		defer poll.Stop()
		for {
			if _, err := os.Stat(marker); err == nil {
				break
			}
			<-poll.C
		}
		cancel()
		b.Stop()
		got := b.Ticks()
		if len(got) != n+1 || got[n].Exit != 143 {
			t.Errorf("interrupted tick: %+v", got[n:])
		}
	})
}
