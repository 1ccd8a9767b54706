package tenancy

import (
	"encoding/json"
	"errors"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

// hexSha is the expression isHexSha replaces: the fuzzer's oracle.
var hexSha = regexp.MustCompile(`^[0-9a-f]{64}$`)

// isHexSha agrees with the expression it replaces.
func FuzzIsHexSha(f *testing.F) {
	for _, s := range []string{"", strings.Repeat("a", 64), strings.Repeat("0", 63), strings.Repeat("f", 65), strings.Repeat("A", 64), strings.Repeat("g", 64), strings.Repeat("a", 63) + "\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := isHexSha(s), hexSha.MatchString(s); got != want {
			t.Fatalf("isHexSha(%q) = %v, the expression says %v", s, got, want)
		}
	})
}

func FuzzDecodeCheckin(f *testing.F) {
	for _, s := range []string{
		`{"env_id": "env-a", "desired_sha": "` + strings.Repeat("a", 64) + `", "action": "apply", "purge_volumes": false,
		  "bundle_url": "/v1/agent/bundle/env-a/x", "checkin_interval_s": 60,
		  "vault": {"addr": "https://bao.cbs.tikali.net:8200", "mount": "monky", "prefix": "env-a/see"}}`,
		`{"action": "none"}`, `{"action": "none", "checkin_interval_s": -1}`, `{"action": "none", "vault": {"addr": "bao:8200"}}`,
		`{"action": "down", "purge_volumes": true}`, `{"action": 1}`, `[]`, `null`, ``, `{"vault": []}`,
		`{"action": "none", "apply_windows": ["Mon-Fri 02:00-05:00", "Sat,Sun 00:00-24:00"], "apply_windows_tz": "Europe/Berlin", "ignore_window": true}`,
		`{"action": "none", "apply_windows": ["Mon 25:00-26:00"]}`, `{"action": "none", "apply_windows_tz": ""}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r, err := decodeCheckin(body, "env-a")
		if err != nil {
			var pe *ProtocolError
			if !errors.As(err, &pe) || !errors.Is(err, ErrProtocol) {
				t.Fatalf("error %T is not a ProtocolError", err)
			}
			return
		}
		switch r.Action {
		case protocol.ActionApply:
			if !hexSha.MatchString(r.DesiredSha) || r.BundleURL == "" {
				t.Fatalf("apply accepted without a usable sha/url: %+v", r)
			}
		case protocol.ActionNone, protocol.ActionDown:
		default:
			t.Fatalf("action %q accepted", r.Action)
		}
		if r.EnvID != "" && r.EnvID != "env-a" {
			t.Fatalf("env %q accepted", r.EnvID)
		}
		if r.DesiredSha != "" && !hexSha.MatchString(r.DesiredSha) {
			t.Fatalf("desired_sha %q accepted", r.DesiredSha)
		}
		if r.CheckinIntervalS < 0 {
			t.Fatalf("checkin_interval_s %d accepted", r.CheckinIntervalS)
		}
		if a := r.Vault.Addr; a != "" {
			if u, err := url.Parse(a); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				t.Fatalf("vault.addr %q accepted", a)
			}
		}
		if _, err := Windows(r, []string{"Mon 02:00-05:00"}, "Europe/Berlin"); err != nil {
			t.Fatalf("accepted apply windows that do not parse: %v", err)
		}
	})
}

func FuzzDecodeLease(f *testing.F) {
	for _, s := range []string{
		`{"env_id": "env-a", "login_jwt": "eyJ.x.y", "ttl_s": 3600, "mount": "jwt-tenancy", "role": "see-env", "addr": "https://b:8200"}`,
		`{"login_jwt": "a.b.c", "vault": {"addr": "https://b:8200"}}`,
		`{"wrapping_token": "s.x", "role_id": "r"}`, `{"login_jwt": 5}`, `{}`, `null`, `"x"`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		l, err := decodeLease(body, "env-a")
		if err != nil {
			var pe *ProtocolError
			var ref *protocol.Refusal
			if !errors.As(err, &pe) && !(errors.As(err, &ref) && ref.Code == protocol.CodeLeaseShape) {
				t.Fatalf("error %T %v is neither a ProtocolError nor LEASE_SHAPE", err, err)
			}
			return
		}
		if l.LoginJWT == "" || l.WrappingToken != "" || l.RoleID != "" || l.TTLSec < 0 {
			t.Fatalf("accepted %+v", l)
		}
		if l.Addr == "" && l.Vault != nil && l.Vault.Addr != "" {
			t.Fatal("nested vault.addr not adopted")
		}
		if len(l.LoginJWT) >= 16 {
			// Whatever the body, the jwt must never reach an error: checked via a second decode
			// of a body made invalid around it.
			if _, err := decodeLease([]byte(`{"login_jwt": "`+l.LoginJWT+`", "ttl_s": "x"}`), "env-a"); err != nil && strings.Contains(err.Error(), l.LoginJWT) {
				t.Fatal("error quotes the login_jwt")
			}
		}
	})
}

func FuzzDecodeBundle(f *testing.F) {
	for _, s := range []string{`{"files": {"bundle.json": "{}"}}`, `{"files": {"a": 1}}`, `{"files": null}`, `{}`, `x`,
		`{"files": {"docker-compose.yml": "services: {}\n", "a/b.conf": "x=\u00e9"}, "sha": "ab"}`, `{"files": {}, "Files": {"a": "b"}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		files, err := decodeBundle(body)
		if err != nil {
			var ref *protocol.Refusal
			if !errors.As(err, &ref) || ref.Code != protocol.CodeBundleInvalid {
				t.Fatalf("error %T %v is not BUNDLE_INVALID", err, err)
			}
			return
		}
		if files == nil {
			t.Fatal("nil files accepted")
		}
		// What is accepted is exactly the body's top-level "files" object, every value a string.
		var doc map[string]any
		if err := json.Unmarshal(body, &doc); err != nil {
			t.Fatalf("accepted a body encoding/json refuses (%v): %q", err, body)
		}
		want, _ := doc["files"].(map[string]any)
		if len(files) != len(want) {
			t.Fatalf("accepted %d files of the body's %d: %q", len(files), len(want), body)
		}
		for name, v := range want {
			if s, ok := v.(string); !ok || files[name] != s {
				t.Fatalf("files[%q] = %q, the body says %#v", name, files[name], v)
			}
		}
	})
}

// FuzzFirstLine: whatever answers in tenancy's place, the line the journal shows of its body is
// short, printable, valid UTF-8 and never holds the bearer.
func FuzzFirstLine(f *testing.F) {
	f.Add([]byte("<html>\r\n<head><title>401 Authorization Required</title></head>\r\n"), "s.tok")
	f.Add([]byte("\n\n  Bearer s.tok refused\n"), "s.tok")
	f.Add([]byte("\xff\xfe<x>\x00"), "abc")
	f.Add([]byte("a\x00bc"), "abc") // dropping the NUL after the mask would spell the token
	f.Fuzz(func(t *testing.T, body []byte, tok string) {
		line := firstLine(body, secret.New(tok))
		if len(line) > 120+len("…") || !utf8.ValidString(line) || strings.ContainsFunc(line, func(r rune) bool { return !unicode.IsPrint(r) }) {
			t.Fatalf("firstLine = %q", line)
		}
		// A bearer is printable, has no space and no '*' (which the mask could spell).
		if len(tok) >= 3 && !strings.ContainsFunc(tok, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) || r == '*' }) && strings.Contains(line, tok) {
			t.Fatalf("firstLine = %q holds the token %q", line, tok)
		}
	})
}
