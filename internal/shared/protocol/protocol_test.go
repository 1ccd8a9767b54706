package protocol

import (
	"cmp"
	"encoding/json"
	"errors"
	"testing"
)

func TestParseErrorBody(t *testing.T) {
	for _, tc := range []struct {
		body string
		want ErrorBody
	}{
		{`{"code": "AGENT_UNAUTHENTICATED", "message": "bearer refused"}`, ErrorBody{"AGENT_UNAUTHENTICATED", "bearer refused"}},
		{`{"detail": {"code": "AGENT_ENV_MISMATCH", "message": "token of env-x"}}`, ErrorBody{"AGENT_ENV_MISMATCH", "token of env-x"}},
		{`{"detail": "Not authenticated"}`, ErrorBody{"", "Not authenticated"}},
		{`{"detail": "BACKEND_UNKNOWN: no backend env-x"}`, ErrorBody{"BACKEND_UNKNOWN", "no backend env-x"}},
		{`<html>502</html>`, ErrorBody{}},
		{``, ErrorBody{}},
		{`{"code": 5}`, ErrorBody{}},
		{`{"code": "X", "detail": {"code": "Y", "message": "m"}}`, ErrorBody{"X", "m"}},
		// The top-level code wins over a plain "CODE: message" detail, which is then only the message.
		{`{"code": "AGENT_UNAUTHENTICATED", "detail": "BACKEND_UNKNOWN: no backend env-x"}`, ErrorBody{"AGENT_UNAUTHENTICATED", "BACKEND_UNKNOWN: no backend env-x"}},
		{`{"code": "X", "message": "m", "detail": "BACKEND_UNKNOWN: no backend env-x"}`, ErrorBody{"X", "m"}},
		{`{"message": "m", "detail": "BACKEND_UNKNOWN: no backend env-x"}`, ErrorBody{"BACKEND_UNKNOWN", "no backend env-x"}},
		{`{"detail": "Ab: not a code"}`, ErrorBody{"", "Ab: not a code"}},
		// Not what tenancy writes: a key given twice, or in another case, carries no code.
		{`{"code": "AGENT_ENV_MISMATCH", "code": "AGENT_UNAUTHENTICATED"}`, ErrorBody{}},
		{`{"CODE": "AGENT_UNAUTHENTICATED"}`, ErrorBody{}},
		{`{"detail": {"Code": "AGENT_ENV_MISMATCH"}}`, ErrorBody{}},
	} {
		if got := ParseErrorBody([]byte(tc.body)); got != tc.want {
			t.Errorf("ParseErrorBody(%s) = %+v, want %+v", tc.body, got, tc.want)
		}
	}
}

func TestRefusal(t *testing.T) {
	var err error = Refuse(CodeDisk, "has %d MiB free", 3)
	var r *Refusal
	if !errors.As(err, &r) || r.Code != CodeDisk || err.Error() != "DISK_INSUFFICIENT: has 3 MiB free" {
		t.Errorf("refusal = %v", err)
	}
}

// FuzzParseErrorBody checks what a parsed body says against a plain decode of the same bytes:
// the top-level code wins, then the nested one, then a plain "CODE: message" detail (whose
// message then replaces the top-level one); a code is never invented.
func FuzzParseErrorBody(f *testing.F) {
	f.Add([]byte(`{"detail": {"code": "A", "message": "b"}}`))
	f.Add([]byte(`{"detail": "x"}`))
	f.Add([]byte(`{"code": "AGENT_UNAUTHENTICATED", "detail": "BACKEND_UNKNOWN: no backend"}`))
	f.Add([]byte(`{"message": "m", "detail": "BACKEND_UNKNOWN: no backend"}`))
	f.Add([]byte(`{"code": "X", "message": "m", "detail": {"code": "Y", "message": "n"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		got := ParseErrorBody(b)
		if got == (ErrorBody{}) {
			return
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatalf("ParseErrorBody(%q) = %+v from a body encoding/json refuses: %v", b, got, err)
		}
		str := func(v any) string { s, _ := v.(string); return s }
		code, msg := str(m["code"]), str(m["message"])
		var want ErrorBody
		switch d := m["detail"].(type) {
		case map[string]any:
			want = ErrorBody{cmp.Or(code, str(d["code"])), cmp.Or(msg, str(d["message"]))}
		case string:
			want = ErrorBody{code, cmp.Or(msg, d)}
			if sub := plainCode.FindStringSubmatch(d); sub != nil && code == "" {
				want = ErrorBody{sub[1], sub[2]}
			}
		default:
			want = ErrorBody{code, msg}
		}
		if got != want {
			t.Fatalf("ParseErrorBody(%q) = %+v, want %+v", b, got, want)
		}
	})
}
