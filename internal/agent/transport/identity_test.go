package transport

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/openziti/identity"
	"github.com/openziti/sdk-golang/ziti"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/itest"
)

const ctrl = "https://ctrl.example.net:1280/edge/client/v1"

func TestCheckIdentity(t *testing.T) {
	p := newPKI(t)
	cert, key, _ := p.leaf(t)
	_, otherKey, _ := p.leaf(t)
	ca := string(p.caPEM)
	const secretish = "S3CRET-KEY-MATERIAL-DO-NOT-PRINT"
	badDER := "pem:-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"

	cases := []struct {
		name     string
		files    map[string][]byte
		errs     map[string]error
		wantKind error  // nil: no error
		wantText string // substring of Error()
	}{
		{name: "valid", files: map[string][]byte{"/id.json": identityJSON(t, ctrl, "pem:"+string(cert), "pem:"+string(key), "pem:"+ca)}},
		{name: "valid ztAPIs and bare PEM", files: map[string][]byte{"/id.json": []byte(fmt.Sprintf(
			`{"ztAPIs":[%q],"id":{"cert":%q,"key":%q}}`, ctrl, cert, key))}},
		{name: "valid with file references", files: map[string][]byte{
			"/id.json":       identityJSON(t, ctrl, "file:///keys/cert.pem", "/keys/key.pem", "file:///keys/ca.pem"),
			"/keys/cert.pem": cert, "/keys/key.pem": key, "/keys/ca.pem": p.caPEM,
		}},
		{name: "engine key is left to the SDK", files: map[string][]byte{"/id.json": identityJSON(t, ctrl, "pem:"+string(cert), "pkcs11:///usr/lib/softhsm.so?slot=0", "")}},

		{name: "missing", wantKind: ErrIdentityMissing, wantText: "/id.json does not exist"},
		{name: "unreadable", errs: map[string]error{"/id.json": fs.ErrPermission}, wantKind: ErrIdentityUnreadable,
			wantText: "is not readable by this user (uid "},
		{name: "unreadable names the group fix", errs: map[string]error{"/id.json": fs.ErrPermission}, wantKind: ErrIdentityUnreadable,
			wantText: "add the agent's user to the file's group, usually `ziti`"},
		{name: "other read error", errs: map[string]error{"/id.json": errors.New("is a directory")}, wantKind: ErrIdentityUnreadable, wantText: "cannot be read"},
		{name: "empty", files: map[string][]byte{"/id.json": []byte(" \n")}, wantKind: ErrIdentityMalformed, wantText: "is empty"},
		{name: "malformed JSON", files: map[string][]byte{"/id.json": []byte(`{"ztAPI": "https://x", "id": {`)}, wantKind: ErrIdentityMalformed, wantText: "is not valid JSON"},
		{name: "JSON array", files: map[string][]byte{"/id.json": []byte(`[1,2]`)}, wantKind: ErrIdentityMalformed, wantText: "is not a ziti identity"},
		{name: "cert of the wrong type", files: map[string][]byte{"/id.json": []byte(`{"ztAPI":"` + ctrl + `","id":{"cert":7}}`)}, wantKind: ErrIdentityMalformed, wantText: "id.cert"},
		{name: "no controller", files: map[string][]byte{"/id.json": identityJSON(t, "", "pem:"+string(cert), "pem:"+string(key), "")}, wantKind: ErrIdentityMalformed, wantText: "no controller URL"},
		{name: "plain http controller", files: map[string][]byte{"/id.json": identityJSON(t, "http://ctrl:1280", "pem:"+string(cert), "pem:"+string(key), "")}, wantKind: ErrIdentityMalformed, wantText: `"http://ctrl:1280" is not an https URL`},
		{name: "no cert", files: map[string][]byte{"/id.json": identityJSON(t, ctrl, "", "pem:"+string(key), "")}, wantKind: ErrIdentityBadCert, wantText: "id.cert is empty"},
		{name: "garbage cert", files: map[string][]byte{"/id.json": identityJSON(t, ctrl, "pem:garbage", "pem:"+string(key), "")}, wantKind: ErrIdentityBadCert, wantText: "bad certificate (id.cert): no PEM CERTIFICATE block"},
		{name: "cert with bad DER", files: map[string][]byte{"/id.json": identityJSON(t, ctrl, badDER, "pem:"+string(key), "")}, wantKind: ErrIdentityBadCert, wantText: "bad certificate (id.cert)"},
		{name: "cert file missing", files: map[string][]byte{"/id.json": identityJSON(t, ctrl, "file:///gone.pem", "pem:"+string(key), "")}, wantKind: ErrIdentityBadCert, wantText: "referenced file /gone.pem"},
		{name: "no key", files: map[string][]byte{"/id.json": identityJSON(t, ctrl, "pem:"+string(cert), "", "")}, wantKind: ErrIdentityBadKey, wantText: "id.key is empty"},
		{name: "garbage key", files: map[string][]byte{"/id.json": identityJSON(t, ctrl, "pem:"+string(cert), "pem:"+secretish, "")}, wantKind: ErrIdentityBadKey, wantText: "bad private key (id.key): no PEM private key block"},
		{name: "key with bad DER", files: map[string][]byte{"/id.json": identityJSON(t, ctrl, "pem:"+string(cert), "pem:-----BEGIN EC PRIVATE KEY-----\n"+secretish+"\n-----END EC PRIVATE KEY-----\n", "")}, wantKind: ErrIdentityBadKey, wantText: "bad private key (id.key)"},
		{name: "key of another certificate", files: map[string][]byte{"/id.json": identityJSON(t, ctrl, "pem:"+string(cert), "pem:"+string(otherKey), "")}, wantKind: ErrIdentityBadKey, wantText: "does not belong to its certificate"},
		{name: "garbage CA", files: map[string][]byte{"/id.json": identityJSON(t, ctrl, "pem:"+string(cert), "pem:"+string(key), "pem:nope")}, wantKind: ErrIdentityBadCert, wantText: "bad CA bundle (id.ca)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckIdentity("/id.json", fakeFS{files: tc.files, errs: tc.errs}.read)
			if tc.wantKind == nil {
				if err != nil {
					t.Fatalf("CheckIdentity: %v", err)
				}
				return
			}
			var ie *IdentityError
			if !errors.As(err, &ie) {
				t.Fatalf("got %T %v, want *IdentityError", err, err)
			}
			if ie.Path != "/id.json" {
				t.Errorf("Path = %q", ie.Path)
			}
			if !errors.Is(err, tc.wantKind) {
				t.Errorf("error %q is not %v", err, tc.wantKind)
			}
			if !strings.HasPrefix(err.Error(), "transport sdk: identity /id.json ") {
				t.Errorf("error %q lacks the journal prefix", err)
			}
			if !strings.Contains(err.Error(), tc.wantText) {
				t.Errorf("error %q lacks %q", err, tc.wantText)
			}
			if strings.Contains(err.Error(), secretish) || strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Errorf("error quotes key material: %q", err)
			}
		})
	}
}

// TestIdentityFaultsThroughNew runs each pre-flight fault through New in sdk mode: the agent
// gets the named *IdentityError and this process is still here to check it (the SDK would have
// exited on the bad certificate and panicked on the garbage key).
func TestIdentityFaultsThroughNew(t *testing.T) {
	p := newPKI(t)
	cert, key, _ := p.leaf(t)
	files := map[string][]byte{
		"/malformed.json": []byte(`{"id": `),
		"/badcert.json":   identityJSON(t, ctrl, "pem:garbage", "pem:"+string(key), ""),
		"/badkey.json":    identityJSON(t, ctrl, "pem:"+string(cert), "pem:garbage", ""),
	}
	errs := map[string]error{"/mode000.json": fs.ErrPermission}
	cases := []struct {
		path string
		kind error
	}{
		{"/missing.json", ErrIdentityMissing},
		{"/mode000.json", ErrIdentityUnreadable},
		{"/malformed.json", ErrIdentityMalformed},
		{"/badcert.json", ErrIdentityBadCert},
		{"/badkey.json", ErrIdentityBadKey},
	}
	for _, tc := range cases {
		t.Run(tc.path, func(t *testing.T) {
			tr, err := New(Options{
				Mode: ModeSDK, IdentityFile: tc.path, ReadFile: fakeFS{files: files, errs: errs}.read,
				TenancyService: "monky.tenancy.deploy", TenancyHostPort: "monky.tenancy.deploy:443",
			})
			if tr != nil {
				tr.Close()
				t.Fatal("New returned a Transport for a broken identity")
			}
			var ie *IdentityError
			if !errors.As(err, &ie) || !errors.Is(err, tc.kind) {
				t.Fatalf("New: %v, want *IdentityError of kind %v", err, tc.kind)
			}
		})
	}
}

func TestCheckIdentityOnDisk(t *testing.T) {
	dir := t.TempDir()
	valid := filepath.Join(dir, "valid.json")
	if err := os.WriteFile(valid, validIdentity(t, ctrl), 0o640); err != nil {
		t.Fatal(err)
	}
	t.Run("valid", func(t *testing.T) {
		if err := CheckIdentity(valid, nil); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("missing", func(t *testing.T) {
		if err := CheckIdentity(filepath.Join(dir, "nope.json"), nil); !errors.Is(err, ErrIdentityMissing) {
			t.Fatalf("got %v", err)
		}
	})
	t.Run("directory", func(t *testing.T) {
		if err := CheckIdentity(dir, nil); !errors.Is(err, ErrIdentityUnreadable) {
			t.Fatalf("got %v", err)
		}
	})
	// A FIFO in the identity's place is refused at once: a plain open would wait for a writer.
	t.Run("fifo", func(t *testing.T) {
		fifo := filepath.Join(t.TempDir(), "identity.json")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := CheckIdentity(fifo, nil); !errors.Is(err, ErrIdentityUnreadable) || !strings.Contains(err.Error(), "not a regular file (fifo)") {
			t.Fatalf("got %v", err)
		}
	})
	// The check asks the kernel, never the mode bits: root reads a mode-000 file (as CI runs; for
	// the refusal TestIdentityUnreadableAsNobody re-runs as uid 65534), any other uid is refused.
	t.Run("mode 000 as this uid", func(t *testing.T) {
		locked := filepath.Join(dir, "locked.json")
		if err := os.WriteFile(locked, validIdentity(t, ctrl), 0o000); err != nil {
			t.Fatal(err)
		}
		err := CheckIdentity(locked, nil)
		if os.Geteuid() == 0 {
			if err != nil {
				t.Fatalf("root was refused a file it can read: %v", err)
			}
			return
		}
		if !errors.Is(err, ErrIdentityUnreadable) || !strings.Contains(err.Error(), "usually `ziti`") {
			t.Fatalf("got %v", err)
		}
	})
}

// nobodyEnv carries the identity path into the re-run of this test binary under setpriv.
const nobodyEnv = "TRANSPORT_TEST_UNREADABLE_IDENTITY"

// TestIdentityUnreadableAsNobody checks the real permission path. CI runs as root, which reads a
// mode-000 file, so the test binary re-runs itself as uid/gid 65534 with no groups.
func TestIdentityUnreadableAsNobody(t *testing.T) {
	if path := os.Getenv(nobodyEnv); path != "" {
		// The child, as uid 65534.
		err := CheckIdentity(path, nil)
		if !errors.Is(err, ErrIdentityUnreadable) {
			t.Fatalf("CheckIdentity as uid %d: %v", os.Geteuid(), err)
		}
		want := fmt.Sprintf("is not readable by this user (uid %d)", os.Geteuid())
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q lacks %q", err, want)
		}
		tr, err := New(Options{Mode: ModeSDK, IdentityFile: path, TenancyService: "s", TenancyHostPort: "s:443"})
		if tr != nil || !errors.Is(err, ErrIdentityUnreadable) {
			t.Fatalf("New as uid %d: %v", os.Geteuid(), err)
		}
		fmt.Println("CHILD-CHECKED-UNREADABLE")
		return
	}
	if os.Geteuid() != 0 {
		itest.Unavailable(t, "needs root to re-run as uid 65534 (TestCheckIdentityOnDisk covers mode 000 as this uid)")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Fatalf("running as root but setpriv is missing: %v", err)
	}
	// Everything the child touches must be reachable by uid 65534: the test binary lives in a
	// 0700 build directory, so copy it out.
	dir, err := os.MkdirTemp("", "transport-setpriv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "transport.test")
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	locked := filepath.Join(dir, "monky-host.env.json")
	if err := os.WriteFile(locked, validIdentity(t, ctrl), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(locked, 0o000); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
		bin, "-test.run=^TestIdentityUnreadableAsNobody$", "-test.v", "-test.count=1")
	cmd.Env = []string{nobodyEnv + "=" + locked, "PATH=/usr/bin:/bin"}
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child as uid 65534 failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "CHILD-CHECKED-UNREADABLE") {
		t.Fatalf("child did not run the check:\n%s", out)
	}
}

// FuzzCheckIdentity: whatever the file holds, the pre-flight returns nil or an *IdentityError,
// and never panics.
func FuzzCheckIdentity(f *testing.F) {
	f.Add(validIdentity(f, ctrl))
	f.Add(validIdentity(f, "http://ctrl.example.net:1280"))
	{ // a key of another certificate
		p, q := newPKI(f), newPKI(f)
		cert, _, _ := p.leaf(f)
		_, key, _ := q.leaf(f)
		f.Add(identityJSON(f, ctrl, "pem:"+string(cert), "pem:"+string(key), ""))
	}
	f.Add([]byte(`{"ztAPI":"https://c:1","id":{"cert":"pem:x","key":"pem:y"}}`))
	f.Add([]byte(`{"ztAPI":"https://c:1","id":{"cert":"pem:-----BEGIN CERTIFICATE-----\nAA==\n-----END CERTIFICATE-----","key":"pem:-----BEGIN PRIVATE KEY-----\nAA==\n-----END PRIVATE KEY-----"}}`))
	f.Add([]byte(`{"ztAPIs":["https://c:1"],"id":{"cert":"file:x","key":"engine:z"}}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(``))
	f.Add([]byte(`{"id":null}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		read := func(path string) ([]byte, error) {
			if path == "/id.json" {
				return data, nil
			}
			return nil, &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
		}
		err := CheckIdentity("/id.json", read)
		if err != nil {
			var ie *IdentityError
			if !errors.As(err, &ie) || ie.Kind == nil {
				t.Fatalf("got %T %v, want *IdentityError with a kind", err, err)
			}
			return
		}
		// What the pre-flight accepts, the SDK loads: https controllers, and an identity its own
		// loader takes without an error, a panic or an exit (a hardware-engine key excepted: the
		// pre-flight leaves it to the SDK, and there is no engine here).
		var cfg ziti.Config
		if err := json.Unmarshal(data, &cfg); err != nil {
			t.Fatalf("accepted an identity ziti.Config refuses: %v", err)
		}
		urls := cfg.ZtAPIs
		if len(urls) == 0 {
			urls = []string{cfg.ZtAPI}
		}
		for _, raw := range urls {
			if u, err := url.Parse(raw); err != nil || u.Scheme != "https" || u.Host == "" {
				t.Fatalf("accepted controller URL %q", raw)
			}
		}
		if !strings.HasPrefix(cfg.ID.Key, "pem:") && !strings.HasPrefix(cfg.ID.Key, "file:") {
			return
		}
		certPEM, certInline := strings.CutPrefix(cfg.ID.Cert, "pem:")
		keyPEM, keyInline := strings.CutPrefix(cfg.ID.Key, "pem:")
		if certInline && keyInline {
			if _, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM)); err != nil {
				t.Fatalf("accepted a certificate and key crypto/tls refuses as a pair: %v", err)
			}
		}
		routeSDKLogs(slog.New(slog.DiscardHandler))
		if err := safeCall("load identity", func() error { _, err := identity.LoadIdentity(cfg.ID); return err }); err != nil {
			t.Fatalf("accepted an identity the SDK cannot load: %v", err)
		}
	})
}
