package unitscore

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	out := []byte("✗ PrivateNetwork=   Service has access to the host's network   0.5\n" +
		"→ Overall exposure level for monky-deployd.service: 1.2 OK 🙂\n")
	v, verdict, err := Parse(out, "monky-deployd.service")
	if err != nil || v != 1.2 || verdict != "OK" {
		t.Errorf("Parse = %v %q %v", v, verdict, err)
	}
	if _, _, err := Parse(out, "fleetctl-exporter.service"); err == nil || !strings.Contains(err.Error(), "no overall exposure") {
		t.Errorf("Parse of another unit: %v", err)
	}
	if _, _, err := Parse([]byte("Overall exposure level for x.service: 9.9.9 UNSAFE"), "x.service"); err == nil {
		t.Error("a malformed number was accepted")
	}
}

func TestResult(t *testing.T) {
	if r := (Result{Unit: "a", Exposure: 3.6, Limit: 3.5}); !r.Over() || !strings.Contains(r.String(), "OVER") {
		t.Errorf("3.6 over 3.5: %v %s", r.Over(), r)
	}
	if r := (Result{Unit: "a", Exposure: 3.5, Limit: 3.5}); r.Over() {
		t.Error("3.5 is within a limit of 3.5")
	}
}
