//go:build integration

package bundle_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bundle"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bundle/bundletest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/compose"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/itest"
)

const (
	itProject = "i10-judge"
	itSecret  = "s3cr3t-v4lue"
)

// itRedactor holds the secret the tests render, as the tick's holds every secret it read.
func itRedactor() *secret.Redactor {
	red := &secret.Redactor{}
	red.Add(itSecret)
	return red
}

// rendered stages compose (at file) and its .env in a fresh release directory and returns what
// the real `docker compose config` makes of it, as the agent runs it.
func rendered(t testing.TB, file, content, template string, extra map[string]string) (string, []byte, error) {
	t.Helper()
	dir := t.TempDir()
	files := map[string]string{file: content}
	for k, v := range extra {
		files[k] = v
	}
	env, err := bundle.RenderEnv(template, map[string]secret.Value{"DB_PASSWORD": secret.New(itSecret)})
	if err != nil {
		t.Fatal(err)
	}
	files[".env"] = env
	for p, c := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d := &compose.Docker{ConfigDir: t.TempDir(), Project: itProject, Runner: runner.Exec{}, Redact: itRedactor()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := d.Config(ctx, dir, file)
	return dir, out, err
}

// The bypass table once more, judged after the render with the real compose plugin: no class
// gets through. Each is refused by the post-render judgement, or compose itself will not render
// it (an include or an extends of a file that is not there); one whose pre-lease refusal was
// for privilege is refused for privilege again.
func TestPostRenderJudgementWithRealCompose(t *testing.T) {
	itest.Require(t, itest.PartCompose)
	// The classes compose itself will not render, a file or volume that is not there. Every
	// other class must reach the agent's post-render judgement: a compose that refused them all
	// (broken, or run in the wrong directory) would otherwise pass this test having judged nothing.
	composeRefuses := map[string]bool{
		"bind from a secret variable":    true, // names a volume that is not declared
		"label_file outside the release": true,
		"env_file outside the release":   true,
		"include":                        true,
		"extends.file":                   true,
	}
	classes := bundletest.BypassClasses()
	judged := 0
	for _, c := range classes {
		t.Run(c.Name, func(t *testing.T) {
			file := c.File
			if file == "" {
				file = bundle.DefaultComposeFile
			}
			dir, out, err := rendered(t, file, c.Compose, "DB_PASSWORD=${DB_PASSWORD}\n", nil)
			var ce *compose.CmdError
			if err != nil {
				if !errors.As(err, &ce) {
					t.Fatalf("compose config did not run: %v", err)
				}
				// compose quotes values in its errors (an undefined volume named by a secret):
				// the agent's redactor, which holds every secret read, must take them out
				red := &secret.Redactor{}
				red.Add(itSecret)
				if strings.Contains(red.Redact(err.Error()), itSecret) {
					t.Errorf("the redacted error carries the secret: %v", err)
				}
				if !composeRefuses[c.Name] {
					t.Fatalf("compose refused a class the post-render judgement must see: %v", red.Redact(err.Error()))
				}
				t.Logf("compose itself refuses it: %v", err)
				return
			}
			if composeRefuses[c.Name] {
				t.Errorf("compose renders a class this test lists as refused by compose: judged below, update the list")
			}
			judged++
			err = bundle.JudgeRendered(out, file, dir, itProject, false, bundle.Host{}, itRedactor())
			var r *protocol.Refusal
			if !errors.As(err, &r) {
				// the rendered file carries the secret: never print it as is
				t.Fatalf("post-render judgement accepted it:\n%s", strings.ReplaceAll(string(out), itSecret, "***"))
			}
			if !strings.HasPrefix(r.Detail, "rendered: ") || strings.Contains(r.Detail, itSecret) {
				t.Errorf("detail = %q", r.Detail)
			}
			if c.Code == protocol.CodePrivileged && r.Code != protocol.CodePrivileged {
				t.Errorf("code = %s, want %s: %s", r.Code, c.Code, r.Detail)
			}
		})
	}
	if want := len(classes) - len(composeRefuses); judged < want {
		t.Errorf("%d of %d classes reached the post-render judgement, want at least %d", judged, len(classes), want)
	}
}

// The dozen real-world files render and pass the post-render judgement.
func TestRealWorldFilesPassThePostRenderJudgement(t *testing.T) {
	itest.Require(t, itest.PartCompose)
	bundletest.RealWorldFiles(t, "testdata/compose", func(t *testing.T, compose string) {
		dir, out, err := rendered(t, bundle.DefaultComposeFile, compose, "DB_PASSWORD=${DB_PASSWORD}\nTAG=1.2\n",
			map[string]string{"grafana.env": "GF_LOG_LEVEL=warn\n"})
		if err != nil {
			t.Fatalf("compose config: %v", err)
		}
		if err := bundle.JudgeRendered(out, bundle.DefaultComposeFile, dir, itProject, false, bundle.Host{}, itRedactor()); err != nil {
			t.Fatalf("refused: %v", err)
		}
	})
}

// BenchmarkJudgeRendered is the post-render judgement of a typical 5-service file and of a
// 1 MiB one, the `docker compose config` process included.
func BenchmarkJudgeRendered(b *testing.B) {
	itest.Require(b, itest.PartCompose)
	typical := mustReadB(b, "testdata/compose/03-nginx-app.yml") + strings.TrimPrefix(mustReadB(b, "testdata/compose/04-redis-worker.yml"), "services:\n")
	typical = strings.Replace(typical, "volumes:\n  dbdata: {}\n", "", 1) + "  dbdata: {}\n"
	big := bundletest.ManyServices(bundle.MaxComposeBytes)
	for _, c := range []struct{ name, data string }{{"typical-5-services", typical}, {"1MiB", big}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				dir, out, err := rendered(b, bundle.DefaultComposeFile, c.data, "DB_PASSWORD=${DB_PASSWORD}\n", nil)
				if err != nil {
					b.Fatal(err)
				}
				if err := bundle.JudgeRendered(out, bundle.DefaultComposeFile, dir, itProject, false, bundle.Host{}, itRedactor()); err != nil {
					b.Fatalf("%.300v", err)
				}
			}
		})
	}
}

func mustReadB(b *testing.B, p string) string {
	d, err := os.ReadFile(p)
	if err != nil {
		b.Fatal(err)
	}
	return string(d)
}
