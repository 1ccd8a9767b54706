package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/dev/devstack"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// The demo itself runs in internal/test/e2e (TestDemo, TestDemoWithoutDocker): it needs the
// binaries. Here: what it refuses before starting anything.
func TestRunRefusesTooFewBoxes(t *testing.T) {
	var out bytes.Buffer
	err := Run(context.Background(), Options{Dir: t.TempDir(), Boxes: 3, Stdout: &out})
	if err == nil || !strings.Contains(err.Error(), "at least 4") || out.Len() != 0 {
		t.Fatalf("Run = %v, printed %q", err, out.String())
	}
}

func TestNarrativeHelpers(t *testing.T) {
	long := strings.Repeat("x", 300)
	for _, tc := range []struct {
		name string
		oc   devstack.Outcome
		want string
	}{
		{"applied says nothing more", devstack.Outcome{Report: protocol.Report{Result: "applied", Detail: "ignored"}}, ""},
		{"a failure shows its detail", devstack.Outcome{Report: protocol.Report{Result: "failed", Detail: "no engine"}}, ": no engine"},
		{"a long detail is cut", devstack.Outcome{Report: protocol.Report{Result: "refused", Detail: long}}, ": " + long[:140] + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := detail(tc.oc); got != tc.want {
				t.Errorf("detail = %q, want %q", got, tc.want)
			}
		})
	}
	on, off := true, false
	if mesh(nil) != "unknown" || mesh(&on) != "online" || mesh(&off) != "offline" || deref(nil) != -1 {
		t.Error("mesh/deref of nil, true, false")
	}
}

// zitiVersion reads the openziti/ziti module version a binary was built from; a file that is no
// Go binary (or none at all) gives the name alone, never a made-up version.
func TestZitiVersionWithoutBuildInfo(t *testing.T) {
	for _, bin := range []string{"/nonexistent/ziti", "/bin/sh"} {
		if got := zitiVersion(bin); got != "ziti quickstart" {
			t.Errorf("zitiVersion(%s) = %q", bin, got)
		}
	}
}
