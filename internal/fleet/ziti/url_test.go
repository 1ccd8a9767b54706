package ziti

import (
	"net/url"
	"strings"
	"testing"
)

func TestParseManagementURL(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "https://ctrl.example:1280", want: "https://ctrl.example:1280"},
		{in: "https://ctrl.example:1280/", want: "https://ctrl.example:1280"},
		{in: "https://ctrl.example/edge/management/v1", want: "https://ctrl.example"},
		{in: "https://gw.example/ziti/edge/management/v1/", want: "https://gw.example/ziti"},
		{in: "https://gw.example/ziti", want: "https://gw.example/ziti"},
		// ztAPI pasted into ziti.url: the same controller's base.
		{in: "https://ctrl.example:1280/edge/client/v1", want: "https://ctrl.example:1280"},
		{in: "HTTPS://ctrl.example", want: "https://ctrl.example"},
		{in: "https://[::1]:1280", want: "https://[::1]:1280"},
		{in: "http://ctrl.example", err: "not an https URL"},
		{in: "https://admin:hunter2@127.0.0.1:1", err: `"https://admin:xxxxx@127.0.0.1:1" carries a user or password`},
		{in: "https://admin@127.0.0.1:1", err: "carries a user or password"},
		{in: "https://ctrl.example?x=1", err: "query or fragment"},
		{in: "https://ctrl.example#f", err: "query or fragment"},
		{in: "https://ctrl.example/#", err: "query or fragment"},
		{in: "https://:1280", err: "has no host"},
		{in: "https://ctrl.example:", err: "empty port"},
		{in: "https://ctrl.example:0", err: "port 0 is not 1-65535"},
		{in: "https://ctrl.example:99999", err: "port 99999 is not 1-65535"},
		{in: "ctrl.example:1280", err: "not an https URL"},
		{in: "", err: "not an https URL"},
		{in: "https://admin:hunter2@[::1", err: "FIELD: not a URL"},
		{in: "https://%zz", err: `"https://%zz" is not a URL`},
	} {
		got, err := ParseManagementURL("FIELD", tc.in)
		if tc.err != "" {
			if err == nil || !strings.HasPrefix(err.Error(), "FIELD: ") || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseManagementURL(%q) = %q, %v; want an error naming FIELD with %q", tc.in, got, err, tc.err)
			}
			if err != nil && strings.Contains(err.Error(), "hunter2") {
				t.Errorf("ParseManagementURL(%q): the password is in %q", tc.in, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseManagementURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func TestParseClientAPI(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
	}{
		{in: "https://ctrl.example:1280/edge/client/v1", want: "https://ctrl.example:1280"},
		{in: "https://ctrl.example:1280", want: "https://ctrl.example:1280"},
		// A controller behind a gateway prefix keeps it: management at /prefix/edge/management/v1.
		{in: "https://gw.example:443/prefix/edge/client/v1", want: "https://gw.example:443/prefix"},
		{in: "https://ctrl.example:1280/edge/management/v1", err: "is not the client API"},
		{in: "https://ctrl.example:1280/prefix", err: "set ziti.url"},
		{in: "https://:1280/edge/client/v1", err: "has no host"},
		{in: "https://ctrl.example:99999", err: "port 99999"},
		{in: "https://user:s3cret@ctrl.example:1280/edge/client/v1", err: "carries a user or password"},
		{in: "https://ctrl.example:1280?x=1#f", err: "query or fragment"},
	} {
		got, err := parseClientAPI("ztAPI", tc.in)
		if tc.err != "" {
			if err == nil || !strings.HasPrefix(err.Error(), "ztAPI: ") || !strings.Contains(err.Error(), tc.err) || strings.Contains(err.Error(), "s3cret") {
				t.Errorf("parseClientAPI(%q) = %q, %v; want an error naming ztAPI with %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("parseClientAPI(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

func FuzzParseManagementURL(f *testing.F) {
	for _, s := range []string{"https://c:1280", "https://u:p@c", "https://c/x/edge/management/v1", "https://:1", "https://c:99999", "https://c?q#f", "https://[::1]:1/edge/client/v1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		for _, parse := range []func(string, string) (string, error){ParseManagementURL, parseClientAPI} {
			got, err := parse("FIELD", raw)
			if err != nil {
				if !strings.HasPrefix(err.Error(), "FIELD: ") {
					t.Fatalf("%q: error %q does not name the field", raw, err)
				}
				continue
			}
			// What is accepted is a base that parses back to itself: https, a host, nothing else.
			again, err := ParseManagementURL("again", got)
			u, uerr := url.Parse(got)
			if err != nil || again != got || uerr != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
				t.Fatalf("%q accepted as %q, which reads back as %q, %v", raw, got, again, err)
			}
		}
	})
}
