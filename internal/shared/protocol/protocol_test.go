package protocol

import (
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

func FuzzParseErrorBody(f *testing.F) {
	f.Add([]byte(`{"detail": {"code": "A", "message": "b"}}`))
	f.Add([]byte(`{"detail": "x"}`))
	f.Fuzz(func(t *testing.T, b []byte) { _ = ParseErrorBody(b) })
}
