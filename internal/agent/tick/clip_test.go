package tick_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bao"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/bundle"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/compose"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner/runnertest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tenancy"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// clipSite is one place the agent cuts text that may hold a secret on its way out: what leave
// returns is what reaches a report, the journal, state.json or standard error, after the tick's
// redactor. tail: the cut keeps the text's end (pad is the text after the secret); otherwise its
// start (pad is the text before it).
type clipSite struct {
	name  string
	limit int
	tail  bool
	leave func(t testing.TB, text string, red *secret.Redactor) []string
}

// clipSites is every cut of the agent's outgoing text: docker's output (compose.CmdError),
// compose-go's loader (the post-render judgement), a report's detail and log tail (and with
// them state.json's last_detail), tenancy's and OpenBao's words in an error.
var clipSites = []clipSite{
	{"docker output (compose.MaxErrorTail)", compose.MaxErrorTail, true, func(t testing.TB, text string, red *secret.Redactor) []string {
		fake := runnertest.New(t)
		fake.ExpectPrefix("docker", nil).Returns("", "Error response from daemon: "+text+"\n", 1)
		d := &compose.Docker{ConfigDir: "/var/lib/monky-deployd/docker", Project: "p", Runner: fake, Redact: red, Environ: []string{}}
		err := d.Pull(context.Background(), "/rel", "docker-compose.yml", "")
		if err == nil {
			t.Fatal("pull did not fail")
		}
		return []string{red.Redact(err.Error())}
	}},
	{"compose-go loader (bundle.MaxLoadError)", bundle.MaxLoadError, false, func(t testing.TB, text string, red *secret.Redactor) []string {
		// `docker compose config` writes a literal $ as $$, as the loader reads it back
		port, _ := json.Marshal(strings.ReplaceAll(text, "$", "$$"))
		rendered := fmt.Sprintf(`{"services":{"api":{"image":"x","ports":[%s]}}}`, port)
		err := bundle.JudgeRendered([]byte(rendered), "docker-compose.yml", "/rel", "p", false, bundle.Host{}, red)
		if err == nil {
			t.Fatal("judged a broken file")
		}
		return []string{red.Redact(err.Error())}
	}},
	{"report detail and last_detail (protocol.MaxDetail)", protocol.MaxDetail, false, func(_ testing.TB, text string, red *secret.Redactor) []string {
		return []string{red.TruncateHead(text, protocol.MaxDetail)}
	}},
	{"report log tail (protocol.MaxLogTail)", protocol.MaxLogTail, true, func(_ testing.TB, text string, red *secret.Redactor) []string {
		return []string{red.Truncate(text, protocol.MaxLogTail)}
	}},
	{"tenancy's message (tenancy.MaxMessage)", tenancy.MaxMessage, false, func(t testing.TB, text string, red *secret.Redactor) []string {
		body, _ := json.Marshal(map[string]any{"detail": map[string]string{"code": "SOMETHING", "message": text}})
		return []string{red.Redact(tenancyError(t, http.StatusBadRequest, string(body)))}
	}},
	{"a body without tenancy's code (tenancy.MaxFirstLine)", tenancy.MaxFirstLine, false, func(t testing.TB, text string, red *secret.Redactor) []string {
		return []string{red.Redact(tenancyError(t, http.StatusForbidden, text+"\n"))}
	}},
	{"OpenBao's words (bao.MaxServerMessage)", bao.MaxServerMessage, false, func(t testing.TB, text string, red *secret.Redactor) []string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]any{"errors": []string{text}})
		}))
		defer srv.Close()
		c, err := bao.New(bao.Options{Addr: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.LookupSelf(context.Background(), secret.New("s.agent-token"))
		if err == nil {
			t.Fatal("lookup did not fail")
		}
		return []string{red.Redact(err.Error())}
	}},
}

func tenancyError(t testing.TB, status int, body string) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	_, err := tenancy.New(srv.URL, srv.Client()).Checkin(context.Background(), secret.New("agent-token"), protocol.CheckinRequest{EnvID: env})
	if err == nil {
		t.Fatal("check-in did not fail")
	}
	return err.Error()
}

// secretAtCut places secret in filler ('x') pad bytes from the site's kept end, with enough
// filler on the other side that the site must cut.
func secretAtCut(s clipSite, secret string, pad int) string {
	if s.tail {
		return strings.Repeat("x", s.limit+64) + secret + strings.Repeat("x", pad)
	}
	return strings.Repeat("x", pad) + secret + strings.Repeat("x", s.limit+64)
}

// leakedFragment is the longest part of secret, secret.MinFragment bytes or more, that out holds.
func leakedFragment(out, value string) string {
	for k := len(value); k >= secret.MinFragment; k-- {
		for i := 0; i+k <= len(value); i++ {
			if strings.Contains(out, value[i:i+k]) {
				return value[i : i+k]
			}
		}
	}
	return ""
}

func checkClipSite(t testing.TB, s clipSite, value string, pad int) {
	red := &secret.Redactor{}
	red.Add(value)
	for _, out := range s.leave(t, secretAtCut(s, value, pad), red) {
		if frag := leakedFragment(out, value); frag != "" {
			t.Fatalf("%s, secret %q %d bytes from the kept end: %q of it survives in %q", s.name, value, pad, frag, out)
		}
	}
}

// TestSecretAtEveryClipBoundary puts a secret at every offset around every cut of the agent's
// outgoing text (the sites' own words before the cut are under 80 bytes): no part of it of
// secret.MinFragment bytes or more survives. A docker error line cut before it was redacted
// once sent 10 of a 14-byte password to tenancy, the journal, state.json and stderr.
func TestSecretAtEveryClipBoundary(t *testing.T) {
	for _, s := range clipSites {
		t.Run(s.name, func(t *testing.T) {
			for _, value := range []string{"Q7ZK9W4PV2MJ8H", `p@ss"w0rd&<1>`, "pässwörd-ünï-42"} {
				for pad := s.limit - len(value) - 80; pad <= s.limit+4; pad++ {
					checkClipSite(t, s, value, max(pad, 0))
				}
			}
		})
	}
}

// FuzzSecretAtAClipBoundary is TestSecretAtEveryClipBoundary for any secret the sites carry
// through unchanged (printable, no spaces: tenancy collapses them; no 'x': the filler).
func FuzzSecretAtAClipBoundary(f *testing.F) {
	for i := range clipSites {
		f.Add("Q7ZK9W4PV2MJ8H", uint8(i), 5)
		f.Add(`p@ss"w0rd&<1>`, uint8(i), 70)
	}
	f.Fuzz(func(t *testing.T, value string, site uint8, back int) {
		if len(value) < secret.MinFragment || len(value) > 64 || !utf8.ValidString(value) || strings.ContainsAny(value, "x…") ||
			strings.ContainsFunc(value, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) }) {
			t.Skip()
		}
		s := clipSites[int(site)%len(clipSites)]
		back = abs(back) % (len(value) + 84)
		checkClipSite(t, s, value, max(s.limit+4-back, 0))
	})
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// TestDockerErrorCutThroughASecret is the reproduction: a pull fails with one long line whose
// 600-byte cut passes through a secret read for the release. Whatever part of the secret the cut
// keeps, none of it reaches the report (detail, log tail), state.json, the journal or the error
// the CLI prints.
func TestDockerErrorCutThroughASecret(t *testing.T) {
	for kept := 1; kept < len(dbPassword); kept++ {
		h := newHarness(t)
		h.docker.PullFail = "Error response from daemon: " + strings.Repeat("x", 700) + dbPassword +
			strings.Repeat("x", compose.MaxErrorTail-len("…")-kept)
		h.docker.Logs = "api-1 | " + h.docker.PullFail + "\n"
		h.desire(bundleSpec{})
		err := h.tickErr()
		if tick.ExitCode(err) != tick.ExitFailed {
			t.Fatalf("tick: %v", err)
		}
		r := h.lastReport()
		st := h.state()
		for name, text := range map[string]string{
			"report detail": r.Detail, "report log tail": r.LogTail, "state.json last_detail": st.LastDetail,
			"journal": h.logs.String(), "the CLI's error": err.Error(),
		} {
			if frag := leakedFragment(text, dbPassword); frag != "" {
				t.Errorf("%d bytes kept by the cut: %s holds %q of the secret", kept, name, frag)
			}
		}
		// Masked first, then cut: what the cut keeps of the line holds (a part of) the mask.
		if !strings.Contains(r.Detail, "docker compose pull failed (rc=1): …") || !strings.Contains(r.Detail, "*x") {
			t.Errorf("%d bytes kept: detail %q does not show the mask", kept, r.Detail)
		}
	}
}
