package main

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func lookupFrom(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestLoadConfig(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		want    config
		wantErr string
	}{
		{"defaults", nil, config{listen: ":8080", healthy: true}, ""},
		{"unhealthy", map[string]string{"APP_HEALTHY": "false"}, config{listen: ":8080"}, ""},
		{"ready after", map[string]string{"APP_READY_AFTER_MS": "1500"}, config{listen: ":8080", healthy: true, readyAfter: 1500 * time.Millisecond}, ""},
		{"exit code", map[string]string{"APP_EXIT_CODE": "3", "APP_LISTEN": ":9"}, config{listen: ":9", healthy: true, exitCode: 3}, ""},
		{"bad healthy", map[string]string{"APP_HEALTHY": "nope"}, config{}, "APP_HEALTHY"},
		{"negative ready", map[string]string{"APP_READY_AFTER_MS": "-1"}, config{}, "APP_READY_AFTER_MS"},
		{"bad exit", map[string]string{"APP_EXIT_CODE": "256"}, config{}, "APP_EXIT_CODE"},
		{"exit if a file", map[string]string{"APP_EXIT_IF_FILE": "/data/crash"}, config{listen: ":8080", healthy: true, exitIfFile: "/data/crash"}, ""},
		{"exit if a relative file", map[string]string{"APP_EXIT_IF_FILE": "data/crash"}, config{}, "APP_EXIT_IF_FILE"},
		{"log env", map[string]string{"APP_LOG_ENV": "APP_SECRET"}, config{listen: ":8080", healthy: true, logEnv: "APP_SECRET"}, ""},
		{"log env not a name", map[string]string{"APP_LOG_ENV": "A B"}, config{}, "APP_LOG_ENV"},
		{"log env starting with a digit", map[string]string{"APP_LOG_ENV": "1X"}, config{}, "APP_LOG_ENV"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := loadConfig(lookupFrom(tt.env))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one naming %s", err, tt.wantErr)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

// TestStartLinesLogTheNamedVariable: APP_LOG_ENV puts the value, byte for byte, in the app's
// log — what the integration tests use to make the agent's log-tail redaction matter.
func TestStartLinesLogTheNamedVariable(t *testing.T) {
	value := `p4ss "q" $HOME # x`
	env := lookupFrom(map[string]string{"APP_SECRET": value})
	got := startLines(config{listen: ":8080", healthy: false, logEnv: "APP_SECRET"}, env)
	want := []string{"demoapp dev listening on :8080 (healthy=false)", "demoapp: APP_LOG_ENV: APP_SECRET=" + value}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("start lines = %q, want %q", got, want)
	}
	got = startLines(config{listen: ":8080", healthy: true, logEnv: "ABSENT"}, env)
	if len(got) != 2 || got[1] != "demoapp: APP_LOG_ENV: ABSENT is not set" {
		t.Errorf("start lines for an unset variable = %q", got)
	}
	if got := startLines(config{listen: ":8080", healthy: true}, env); len(got) != 1 || strings.Contains(strings.Join(got, ""), value) {
		t.Errorf("start lines without APP_LOG_ENV = %q", got)
	}
}

func FuzzLoadConfig(f *testing.F) {
	for _, s := range []string{"", "true", "false", "0", "1500", "-1", "x", "99999999999999999999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		for _, k := range []string{"APP_HEALTHY", "APP_READY_AFTER_MS", "APP_EXIT_CODE", "APP_LOG_ENV"} {
			cfg, err := loadConfig(lookupFrom(map[string]string{k: v}))
			if err != nil {
				if !strings.Contains(err.Error(), k) {
					t.Fatalf("error %q does not name %s", err, k)
				}
				continue
			}
			if cfg.readyAfter < 0 || cfg.exitCode < 0 || cfg.exitCode > 255 {
				t.Fatalf("%s=%q accepted out of range: %+v", k, v, cfg)
			}
		}
	})
}

func TestHandler(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	env := map[string]string{"SECRET_X": "a b\"c$d\n", "EMPTY": ""}
	files := map[string]string{"/srv/app.conf": "listen 80;\n"}
	readFile := func(p string) ([]byte, error) {
		if s, ok := files[p]; ok {
			return []byte(s), nil
		}
		return nil, errors.New("no such file")
	}
	tests := []struct {
		name     string
		cfg      config
		upFor    time.Duration
		path     string
		wantCode int
		wantBody string
	}{
		{"root", config{healthy: true}, 0, "/", 200, "monky demo app dev\n"},
		{"version", config{healthy: true}, 0, "/version", 200, "dev"},
		{"env exact bytes", config{healthy: true}, 0, "/env?name=SECRET_X", 200, "a b\"c$d\n"},
		{"env empty", config{healthy: true}, 0, "/env?name=EMPTY", 200, ""},
		{"env unset", config{healthy: true}, 0, "/env?name=NOPE", 404, "NOPE: not set\n"},
		{"env no name", config{healthy: true}, 0, "/env", 400, "name: missing\n"},
		{"file", config{healthy: true}, 0, "/file?path=/srv/app.conf", 200, "listen 80;\n"},
		{"file missing", config{healthy: true}, 0, "/file?path=/x", 404, "no such file\n"},
		{"healthy", config{healthy: true}, 0, "/healthz", 200, "ok"},
		{"unhealthy forever", config{healthy: false}, 24 * time.Hour, "/healthz", 503, ""},
		{"still starting", config{healthy: true, readyAfter: time.Second}, 999 * time.Millisecond, "/healthz", 503, ""},
		{"ready", config{healthy: true, readyAfter: time.Second}, time.Second, "/healthz", 200, "ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := func() time.Time { return start.Add(tt.upFor) }
			h := newHandler(tt.cfg, start, now, lookupFrom(env), readFile)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
			body, _ := io.ReadAll(rec.Body)
			if rec.Code != tt.wantCode {
				t.Fatalf("code = %d (%q), want %d", rec.Code, body, tt.wantCode)
			}
			if tt.wantBody != "" && string(body) != tt.wantBody {
				t.Fatalf("body = %q, want %q", body, tt.wantBody)
			}
		})
	}
}

func TestRunCheck(t *testing.T) {
	tests := []struct {
		name string
		cfg  config
		want int
	}{
		{"healthy", config{healthy: true}, 0},
		{"unhealthy", config{healthy: false}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			srv := httptest.NewServer(newHandler(tt.cfg, start, func() time.Time { return start }, lookupFrom(nil), readFileNone))
			defer srv.Close()
			cfg := tt.cfg
			cfg.listen = strings.TrimPrefix(srv.URL, "http://")
			if got := runCheck(cfg); got != tt.want {
				t.Fatalf("runCheck = %d, want %d", got, tt.want)
			}
		})
	}
	t.Run("no server", func(t *testing.T) {
		srv := httptest.NewServer(http.NotFoundHandler())
		addr := strings.TrimPrefix(srv.URL, "http://")
		srv.Close()
		if got := runCheck(config{listen: addr}); got != 1 {
			t.Fatalf("runCheck with nothing listening = %d, want 1", got)
		}
	})
}

func TestRunGet(t *testing.T) {
	start := time.Now()
	env := map[string]string{"X": "va lue\n"}
	srv := httptest.NewServer(newHandler(config{healthy: true}, start, func() time.Time { return start }, lookupFrom(env), readFileNone))
	defer srv.Close()
	cfg := config{listen: strings.TrimPrefix(srv.URL, "http://")}
	tests := []struct {
		path     string
		wantCode int
		wantOut  string
	}{
		{"/env?name=X", 0, "va lue\n"},
		{"/env?name=Y", 1, "Y: not set\n"},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			var out strings.Builder
			if code := runGet(cfg, tt.path, &out); code != tt.wantCode || out.String() != tt.wantOut {
				t.Fatalf("runGet = %d %q, want %d %q", code, out.String(), tt.wantCode, tt.wantOut)
			}
		})
	}
}

func readFileNone(string) ([]byte, error) { return nil, errors.New("none") }
