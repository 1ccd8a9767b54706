package state

import (
	"strings"
	"testing"
)

func TestIdentityRecordLoadsAndIsChecked(t *testing.T) {
	good := `{"identity":{"not_after":"2027-12-02T10:00:00Z","fingerprint":"3f1c","renewed_at":"2026-12-02T10:00:00Z",
		"renewal":{"step":"pending","started_at":"2026-12-02T10:00:00Z","new_fingerprint":"9a9a","failures":2,"last_error":"verify: HTTP 502"}}}`
	var s State
	if err := s.UnmarshalJSON([]byte(good)); err != nil {
		t.Fatal(err)
	}
	if s.Identity == nil || s.Identity.Renewal == nil || s.Identity.Renewal.Failures != 2 || s.Identity.Fingerprint != "3f1c" {
		t.Fatalf("identity = %+v", s.Identity)
	}
	b, err := s.MarshalJSON()
	if err != nil || !strings.Contains(string(b), `"new_fingerprint":"9a9a"`) {
		t.Fatalf("round trip: %v %s", err, b)
	}
	for _, tc := range []struct{ in, want string }{
		{`{"identity":{"renewal":{"step":"verifying","started_at":"2026-12-02T10:00:00Z"}}}`, `identity: renewal: step: "verifying"`},
		{`{"identity":{"renewal":{"started_at":"2026-12-02T10:00:00Z","failures":-1}}}`, "identity: renewal: failures: negative"},
		{`{"identity":{"renewal":{"step":"pending","started_at":"2026-12-02T10:00:00Z"}}}`, "identity: renewal: new_fingerprint: empty"},
		{`{"identity":{"not_after":"soon"}}`, "identity:"},
		{`{"identity":7}`, "identity:"},
	} {
		var s State
		if err := s.UnmarshalJSON([]byte(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want %q", tc.in, err, tc.want)
		}
	}
}
