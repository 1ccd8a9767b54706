package transport

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/michaelquigley/pfxlog"
	"github.com/openziti/identity"
	"github.com/sirupsen/logrus"
)

func TestSDKLogRouting(t *testing.T) {
	logger, buf := newTestLogger(slog.LevelDebug)
	routeSDKLogs(logger)
	const jwt = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl"

	pfxlog.Logger().WithField("sessionToken", "tok-SECRET-1").Debug("connecting with session")
	logrus.WithField("sessionToken", "tok-SECRET-2").WithField("service", "openbao").Info("refreshed " + jwt)
	logrus.Warn("router reconnecting")
	logrus.Error("router gone")

	out := buf.String()
	for _, leak := range []string{"tok-SECRET", jwt, "connecting with session"} {
		if strings.Contains(out, leak) {
			t.Errorf("SDK log output contains %q:\n%s", leak, out)
		}
	}
	for _, want := range []string{
		`level=DEBUG msg="ziti sdk: refreshed ***" service=openbao sessionToken=***`,
		`level=INFO msg="ziti sdk: router reconnecting"`,
		`level=WARN msg="ziti sdk: router gone"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("SDK log output lacks %q:\n%s", want, out)
		}
	}
}

// TestSDKFatalIsRecovered: what the SDK does with a bad identity (Fatalf through its lazy
// loader, a nil dereference on a garbage key) comes back as an error and this process lives on.
func TestSDKFatalIsRecovered(t *testing.T) {
	logger, buf := newTestLogger(slog.LevelInfo)
	routeSDKLogs(logger)
	p := newPKI(t)
	cert, key, _ := p.leaf(t)

	cases := []struct {
		name string
		call func() error
		want string
	}{
		{"logrus Fatalf", func() error { pfxlog.Logger().Fatalf("cannot go on: %s", "reason"); return nil }, "gave up (cannot go on: reason)"},
		{"lazy identity with a garbage cert", func() error {
			li := &identity.LazyIdentity{Config: &identity.Config{Cert: "pem:garbage", Key: "pem:" + string(key)}}
			li.Cert()
			return nil
		}, "gave up (error during lazy load of identity"},
		{"identity with a garbage key", func() error {
			_, err := identity.LoadIdentity(identity.Config{Cert: "pem:" + string(cert), Key: "pem:garbage"})
			return err
		}, "the ziti SDK panicked"},
		{"plain panic", func() error { panic("boom") }, "the ziti SDK panicked: boom"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := safeCall("load", tc.call)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "load: ") {
				t.Fatalf("safeCall: %v, want %q", err, tc.want)
			}
		})
	}
	if !strings.Contains(buf.String(), `level=ERROR msg="ziti sdk: cannot go on: reason"`) {
		t.Errorf("the fatal line did not reach the agent's log:\n%s", buf)
	}
}
