package process

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

func TestProcessLifecycle(t *testing.T) {
	dir := t.TempDir()
	red := &secret.Redactor{}
	red.Add("root-s3cret-token")
	ctx := context.Background()

	t.Run("a server that exits before it is ready", func(t *testing.T) {
		p, err := Start("quitter", filepath.Join(dir, "q.log"), []string{"TOKEN=root-s3cret-token"}, red,
			"/bin/sh", "-c", `echo "token is $TOKEN"; exit 4`)
		if err != nil {
			t.Fatal(err)
		}
		err = p.WaitReady(ctx, func(context.Context) (bool, error) { return false, errors.New("not yet") })
		if !errors.Is(err, ErrExited) {
			t.Fatalf("WaitReady = %v, want ErrExited", err)
		}
		if tail := p.LogTail(); tail != "token is ***" {
			t.Errorf("LogTail = %q, want the token masked", tail)
		}
		if err := p.Stop(); err == nil || !strings.Contains(err.Error(), "already exited") {
			t.Errorf("Stop of an exited server = %v", err)
		}
	})

	t.Run("a server that becomes ready and stops on SIGTERM", func(t *testing.T) {
		p, err := Start("sleeper", filepath.Join(dir, "s.log"), nil, nil, "/bin/sh", "-c", "exec sleep 60")
		if err != nil {
			t.Fatal(err)
		}
		calls := 0
		err = p.WaitReady(ctx, func(context.Context) (bool, error) { calls++; return calls == 3, nil })
		if err != nil || calls != 3 {
			t.Fatalf("WaitReady = %v after %d probes", err, calls)
		}
		if p.Pid() <= 0 {
			t.Error("no pid")
		}
		if err := p.Stop(); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("a server that answers wrongly is broken, not slow", func(t *testing.T) {
		p, err := Start("liar", filepath.Join(dir, "l.log"), nil, nil, "/bin/sh", "-c", "exec sleep 60")
		if err != nil {
			t.Fatal(err)
		}
		defer p.Stop()
		if err := p.WaitReady(ctx, func(context.Context) (bool, error) { return true, errors.New("no auth") }); err == nil {
			t.Fatal("WaitReady accepted a wrong answer")
		}
	})

	t.Run("a server that died is not ready, whatever answers on its port", func(t *testing.T) {
		p, err := Start("dead", filepath.Join(dir, "d.log"), nil, nil, "/bin/sh", "-c", "exit 3")
		if err != nil {
			t.Fatal(err)
		}
		<-p.done
		if err := p.WaitReady(ctx, func(context.Context) (bool, error) { return true, nil }); !errors.Is(err, ErrExited) {
			t.Fatalf("WaitReady = %v, want ErrExited", err)
		}
	})

	t.Run("ctx ends the wait", func(t *testing.T) {
		p, err := Start("slow", filepath.Join(dir, "w.log"), nil, nil, "/bin/sh", "-c", "exec sleep 60")
		if err != nil {
			t.Fatal(err)
		}
		defer p.Stop()
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if err := p.WaitReady(cctx, func(context.Context) (bool, error) { return false, nil }); !errors.Is(err, context.Canceled) {
			t.Fatalf("WaitReady = %v", err)
		}
	})

	t.Run("a binary that does not exist", func(t *testing.T) {
		if _, err := Start("ghost", filepath.Join(dir, "g.log"), nil, nil, filepath.Join(dir, "absent")); err == nil {
			t.Fatal("started a missing binary")
		}
		if _, err := Start("nolog", filepath.Join(dir, "no", "such", "dir.log"), nil, nil, "/bin/true"); err == nil {
			t.Fatal("started without a log file")
		}
	})
}

func TestHelpers(t *testing.T) {
	port, err := FreePort()
	if err != nil || port <= 0 {
		t.Fatalf("FreePort = %d, %v", port, err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	defer srv.Close()
	if code, err := HTTPStatus(context.Background(), srv.URL); code != http.StatusTeapot || err != nil {
		t.Errorf("HTTPStatus = %d, %v", code, err)
	}
	if _, err := HTTPStatus(context.Background(), fmt.Sprintf("http://127.0.0.1:%d/", port)); err == nil {
		t.Error("HTTPStatus of a closed port")
	}
}
