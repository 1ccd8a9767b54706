package identity_test

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/identity"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/testpki"
)

var t0 = time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)

// identityJSON renders an identity file the way ziti-edge-tunnel enroll writes one.
func identityJSON(t testing.TB, fields map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(fields)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func validFields(t testing.TB) (map[string]any, *testpki.Leaf, *testpki.CA) {
	ca := testpki.NewCAValid(t, "net CA", t0.Add(-day), t0.Add(20*day))
	leaf := ca.Client(t, name, t0, t0.Add(365*day))
	return map[string]any{
		"ztAPI":    "https://ctrl.example:1280/edge/client/v1",
		"enableHa": true,
		"id": map[string]string{
			"cert": "pem:" + string(leaf.CertPEM) + string(ca.PEM),
			"key":  "pem:" + string(leaf.KeyPEM),
			"ca":   "pem:" + string(ca.PEM),
		},
	}, leaf, ca
}

func TestParse(t *testing.T) {
	fields, leaf, _ := validFields(t)
	f, err := identity.Parse(identityJSON(t, fields), nil)
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case !f.Leaf().NotAfter.Equal(t0.Add(365 * day)):
		t.Errorf("leaf until %s", f.Leaf().NotAfter)
	case len(f.Cert) != 2 || len(f.CA) != 1 || !f.CA.Earliest().NotAfter.Equal(t0.Add(20*day)):
		t.Errorf("chain %d, CA %d until %s", len(f.Cert), len(f.CA), f.CA.Earliest().NotAfter)
	case !f.Inline || f.Key == nil || !identity.KeyMatches(f.Key, leaf.Cert):
		t.Errorf("inline %v key %v", f.Inline, f.Key)
	case len(f.Controllers) != 1 || f.CAPool() == nil:
		t.Errorf("controllers %v", f.Controllers)
	}

	files := map[string][]byte{"/id/cert.pem": leaf.CertPEM, "/id/key.pem": leaf.KeyPEM}
	read := func(p string) ([]byte, error) {
		if b, ok := files[p]; ok {
			return b, nil
		}
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
	byFile := map[string]any{"ztAPIs": []string{"https://a:1280", "https://b:1280"}, "id": map[string]string{"cert": "file:///id/cert.pem", "key": "/id/key.pem"}}
	if f, err := identity.Parse(identityJSON(t, byFile), read); err != nil || f.Inline || len(f.Controllers) != 2 || f.CAPool() != nil {
		t.Errorf("file references: %v inline=%v", err, f != nil && f.Inline)
	}
	engine := map[string]any{"ztAPI": "https://a:1280", "id": map[string]string{"cert": "pem:" + string(leaf.CertPEM), "key": "pkcs11:///usr/lib/p11.so?id=01"}}
	if f, err := identity.Parse(identityJSON(t, engine), read); err != nil || f.Key != nil {
		t.Errorf("an engine key: %v", err)
	}

	other := testpki.NewCA(t, "other").Client(t, "x", t0, t0.Add(day))
	bad := []struct {
		name   string
		mutate func(m map[string]any, id map[string]string)
		want   string
	}{
		{"no controller", func(m map[string]any, _ map[string]string) { delete(m, "ztAPI") }, "no controller URL"},
		{"http controller", func(m map[string]any, _ map[string]string) { m["ztAPI"] = "http://a:1280" }, "not an https URL"},
		{"ztAPI not a string", func(m map[string]any, _ map[string]string) { m["ztAPI"] = 7 }, "ztAPI: not a string"},
		{"no cert", func(_ map[string]any, id map[string]string) { delete(id, "cert") }, "id.cert: empty"},
		{"garbage cert", func(_ map[string]any, id map[string]string) { id["cert"] = "pem:garbage" }, "id.cert: no PEM CERTIFICATE block"},
		{"missing cert file", func(_ map[string]any, id map[string]string) { id["cert"] = "/nope.pem" }, "id.cert: referenced file /nope.pem"},
		{"no key", func(_ map[string]any, id map[string]string) { delete(id, "key") }, "id.key: empty"},
		{"garbage key", func(_ map[string]any, id map[string]string) {
			id["key"] = "pem:-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n"
		}, "id.key:"},
		{"garbage ca", func(_ map[string]any, id map[string]string) { id["ca"] = "pem:garbage" }, "id.ca: no PEM CERTIFICATE block"},
		{"another key is not caught here", func(_ map[string]any, id map[string]string) { id["key"] = "pem:" + string(other.KeyPEM) }, ""},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			m, _, _ := validFields(t)
			id := m["id"].(map[string]string)
			tc.mutate(m, id)
			_, err := identity.Parse(identityJSON(t, m), read)
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
		})
	}
	for _, raw := range []string{"", "null", "[]", `{"id": 7}`, `{"ztAPI":"https://a:1","id":null}`, "{" + strings.Repeat(" ", 1<<20) + "}"} {
		if _, err := identity.Parse([]byte(raw), read); err == nil {
			t.Errorf("Parse(%.20q) accepted", raw)
		}
	}
}

func TestWithCredentialsKeepsEveryOtherField(t *testing.T) {
	fields, _, ca := validFields(t)
	fields["configTypes"] = []string{"intercept.v1"}
	id := fields["id"].(map[string]string)
	id["altCertificates"] = "kept"
	f, err := identity.Parse(identityJSON(t, fields), nil)
	if err != nil {
		t.Fatal(err)
	}
	next := ca.Client(t, name, t0, t0.Add(730*day))
	raw, err := f.WithCredentials(next.CertPEM, next.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	g, err := identity.Parse(raw, nil)
	if err != nil {
		t.Fatal(err)
	}
	var back map[string]any
	_ = json.Unmarshal(raw, &back)
	backID := back["id"].(map[string]any)
	switch {
	case !g.Leaf().NotAfter.Equal(t0.Add(730 * day)):
		t.Errorf("new leaf until %s", g.Leaf().NotAfter)
	case !identity.KeyMatches(g.Key, next.Cert):
		t.Error("new key not written")
	case string(g.CAPEM) != string(f.CAPEM):
		t.Error("id.ca changed")
	case back["enableHa"] != true || back["ztAPI"] != "https://ctrl.example:1280/edge/client/v1" || backID["altCertificates"] != "kept":
		t.Errorf("fields lost: %v", back)
	case !strings.HasPrefix(backID["cert"].(string), "pem:-----BEGIN CERTIFICATE-----"):
		t.Errorf("cert not inline: %.40q", backID["cert"])
	}
}

// FuzzParse: an identity file of any content never panics the tick, status or doctor.
func FuzzParse(f *testing.F) {
	fields, _, _ := validFields(f)
	f.Add(identityJSON(f, fields))
	f.Add([]byte(`{"ztAPI":"https://a:1","id":{"cert":"pem:x","key":"pem:y","ca":"pem:z"}}`))
	f.Add([]byte(`{"ztAPIs":["https://a:1"],"id":{"cert":"/etc/passwd","key":"pkcs11:x"}}`))
	f.Add([]byte(`{}`))
	read := func(string) ([]byte, error) {
		return []byte("-----BEGIN CERTIFICATE-----\nMII=\n-----END CERTIFICATE-----\n"), nil
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		id, err := identity.Parse(data, read)
		if err == nil && (len(id.Cert) == 0 || len(id.Controllers) == 0) {
			t.Fatalf("accepted without a certificate or a controller: %q", data)
		}
	})
}

func TestWho(t *testing.T) {
	dir := t.TempDir()
	active := func(context.Context) (bool, error) { return true, nil }
	broken := func(context.Context) (bool, error) { return true, errors.New("no systemd") }
	tests := []struct {
		name  string
		w     identity.Who
		path  string
		by    string
		holds bool
	}{
		{"sdk", identity.Who{Transport: "sdk", Window: day}, "/x/id.json", identity.ByAgent, true},
		{"system", identity.Who{Transport: "system", Window: day}, "/x/id.json", identity.ByTunneller, false},
		{"sdk in the tunneller's dir, unit active", identity.Who{Transport: "sdk", Window: day, TunnellerDir: dir, TunnellerActive: active}, dir + "/id.json", identity.ByTunneller, false},
		{"sdk in the tunneller's dir, unit unknown", identity.Who{Transport: "sdk", Window: day, TunnellerDir: dir, TunnellerActive: broken}, dir + "/id.json", identity.ByAgent, true},
		{"sdk elsewhere, unit active", identity.Who{Transport: "sdk", Window: day, TunnellerDir: dir, TunnellerActive: active}, "/x/id.json", identity.ByAgent, true},
		{"proxy tick", identity.Who{Transport: "proxy", Window: day}, "/x/id.json", identity.ByProxy, false},
		{"proxy daemon", identity.Who{Transport: "proxy", Window: day, InProxy: true}, "/x/id.json", identity.ByAgent, true},
		{"off", identity.Who{Transport: "sdk"}, "/x/id.json", identity.Off, true},
		{"off, proxy daemon", identity.Who{Transport: "proxy", InProxy: true}, "/x/id.json", identity.Off, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.w.Decide(context.Background(), tc.path)
			if o.By != tc.by || o.Holds != tc.holds || o.Why == "" || o.Renews() != (tc.by == identity.ByAgent) {
				t.Errorf("Decide = %+v, want by %s holds %v", o, tc.by, tc.holds)
			}
		})
	}
}

func TestCanReplace(t *testing.T) {
	names := func(uid uint32) string {
		return map[uint32]string{0: "root", 64123: "monky-deployd", 64200: "ziti"}[uid]
	}
	group := func(uint32) string { return "ziti" }
	file := identity.Stat{Mode: 0o640, UID: 64123, GID: 64124}
	dir := identity.Stat{Mode: fs.ModeDir | 0o750, UID: 0, GID: 64124}
	perms := func(f identity.Stat, groups []uint32, dirErr error) identity.Perms {
		return identity.Perms{
			Lstat: func(p string) (identity.Stat, error) {
				if strings.HasSuffix(p, ".json") {
					return f, nil
				}
				return dir, nil
			},
			Euid:        func() int { return 64123 },
			Groups:      func() ([]uint32, error) { return groups, nil },
			DirWritable: func(string) error { return dirErr },
			UserName:    names, GroupName: group,
		}
	}
	tests := []struct {
		name   string
		p      identity.Perms
		reason string
		fix    string
	}{
		{"the agent owns it", perms(file, []uint32{64123, 64124}, nil), "", ""},
		{"root may replace anything", identity.Perms{Lstat: func(string) (identity.Stat, error) { return identity.Stat{Mode: 0o640, UID: 64200, GID: 64124}, nil },
			Euid: func() int { return 0 }, DirWritable: func(string) error { return nil }}, "", ""},
		{"a symlink", perms(identity.Stat{Mode: fs.ModeSymlink | 0o777, UID: 64123}, nil, nil), "is a symlink", "set `identity` in the config"},
		{"another owner", perms(identity.Stat{Mode: 0o640, UID: 64200, GID: 64124}, []uint32{64124}, nil),
			"belongs to ziti, and a renewed file written by monky-deployd would belong to monky-deployd", "chown monky-deployd /ids/id.json"},
		{"not in the group", perms(file, []uint32{64123}, nil), "has group ziti, which monky-deployd is not in", "usermod -a -G ziti monky-deployd"},
		{"a directory without write", perms(file, []uint32{64124}, syscall.EACCES), "monky-deployd cannot create files in /ids (root:ziti 0750)", "chgrp ziti /ids && chmod g+rwx /ids"},
		{"a read-only directory", perms(file, []uint32{64124}, syscall.EROFS), "/ids is read-only for this process", "ReadWritePaths=/ids"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.p.CanReplace("/ids/id.json")
			if tc.reason == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var b *identity.Blocked
			if !errors.As(err, &b) || !strings.Contains(b.Reason, tc.reason) || !strings.Contains(b.Fix, tc.fix) {
				t.Fatalf("CanReplace = %v, want reason %q, fix %q", err, tc.reason, tc.fix)
			}
		})
	}
}

// Reading an unchanged identity again reuses the parse; a change to the file or to a file it
// references is read afresh (every file is read again: no timestamp is trusted).
func TestReadReusesTheParseOfUnchangedFiles(t *testing.T) {
	_, leaf, _ := validFields(t)
	other := testpki.NewCA(t, "other").Client(t, name, t0, t0.Add(2*day))
	files := map[string][]byte{
		"/id.json":  identityJSON(t, map[string]any{"ztAPI": "https://a:1280", "id": map[string]string{"cert": "file:///cert.pem", "key": "/key.pem"}}),
		"/cert.pem": leaf.CertPEM,
		"/key.pem":  leaf.KeyPEM,
	}
	reads := 0
	r := &identity.Renewer{Path: "/id.json", ReadFile: func(p string) ([]byte, error) {
		reads++
		if b, ok := files[p]; ok {
			return b, nil
		}
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}}
	first, err := r.Read()
	if err != nil {
		t.Fatal(err)
	}
	again, err := r.Read()
	if err != nil || again != first {
		t.Fatalf("an unchanged identity was parsed again (%v)", err)
	}
	if reads != 6 {
		t.Errorf("%d reads, want 6: each read reads all three files", reads)
	}
	if f, err := (&identity.Renewer{Path: "/id.json", ReadFile: r.ReadFile}).Read(); err != nil || f != first {
		t.Errorf("another Renewer of the same file parsed it again (%v)", err)
	}

	files["/cert.pem"], files["/key.pem"] = other.CertPEM, other.KeyPEM // a renewal through the references
	f, err := r.Read()
	if err != nil || f == first || !f.Leaf().NotAfter.Equal(t0.Add(2*day)) {
		t.Fatalf("a changed referenced file was not read afresh: %v, until %v", err, f.Leaf().NotAfter)
	}
	delete(files, "/key.pem")
	if _, err := r.Read(); err == nil || !strings.Contains(err.Error(), "id.key") {
		t.Fatalf("a referenced file gone: %v, want the parse's error", err)
	}
	files["/id.json"] = []byte("{}")
	if _, err := r.Read(); err == nil {
		t.Fatal("a changed identity file was not parsed afresh")
	}
}
