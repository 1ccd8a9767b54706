package config

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func files(m map[string]string) func(string) ([]byte, error) {
	return func(p string) ([]byte, error) {
		if v, ok := m[p]; ok {
			return []byte(v), nil
		}
		return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
	}
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name, body, wantErr string
		check               func(*testing.T, *File)
	}{
		{name: "full", body: `
ziti:
  url: https://ctrl.cbs.tikali.net:1280
  username: ops
  password_file: secrets/ziti.pw   # relative to the file
  ca_file: /etc/ssl/ziti-ca.pem
tenancy:
  url: https://tenancy.cbs.tikali.net
  token_file: /run/secrets/tenancy
`, check: func(t *testing.T, f *File) {
			if f.Ziti.URL != "https://ctrl.cbs.tikali.net:1280" || f.Ziti.Username != "ops" ||
				f.Ziti.PasswordFile != "/home/ops/.config/fleetctl/secrets/ziti.pw" || f.Ziti.CAFile != "/etc/ssl/ziti-ca.pem" ||
				f.Tenancy.URL != "https://tenancy.cbs.tikali.net" || f.Tenancy.TokenFile != "/run/secrets/tenancy" {
				t.Errorf("%+v", f)
			}
		}},
		{name: "empty", body: ""},
		{name: "comments only", body: "# nothing yet\n"},
		{name: "null sections", body: "ziti:\ntenancy: ~\n"},
		{name: "unknown top key", body: "zitti:\n  url: x\n", wantErr: `line 1: invalid configuration: unknown key "zitti"`},
		{name: "unknown nested key", body: "ziti:\n  url: x\n  pasword_file: y\n", wantErr: `line 3: invalid configuration: unknown key "ziti.pasword_file"`},
		{name: "inline password", body: "ziti:\n  password: hunter2\n", wantErr: "secrets are not kept in the config file; use ziti.password_file"},
		{name: "inline token", body: "tenancy:\n  token: abc\n", wantErr: "tenancy.token_file"},
		{name: "bad type", body: "ziti:\n  url: [a, b]\n", wantErr: "ziti.url: want a string"},
		{name: "number", body: "tenancy:\n  url: 8080\n", wantErr: "tenancy.url: want a string"},
		{name: "duplicate", body: "ziti:\n  url: a\n  url: b\n", wantErr: "appears twice"},
		{name: "list root", body: "- a\n", wantErr: "must be a mapping"},
		{name: "section not a map", body: "ziti: https://x\n", wantErr: "ziti: want a mapping"},
		{name: "not yaml", body: "ziti: [\n", wantErr: "invalid configuration"},
		{name: "two documents", body: "ziti:\n  url: a\n---\nziti:\n  url: b\n", wantErr: "more than one YAML document"},
		{name: "exporter", body: "exporter:\n  listen: 127.0.0.1:9465\n", check: func(t *testing.T, f *File) {
			if f.Exporter.Listen != "127.0.0.1:9465" {
				t.Errorf("%+v", f)
			}
		}},
		{name: "exporter typo", body: "exporter:\n  listn: x\n", wantErr: `unknown key "exporter.listn"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := Parse([]byte(tc.body), "/home/ops/.config/fleetctl/config.yaml")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, ErrInvalid) {
					t.Fatalf("got %v, want %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), "hunter2") {
					t.Fatalf("error leaks the inline password: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tc.check != nil {
				tc.check(t, f)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	read := files(map[string]string{"/cfg.yaml": "ziti:\n  url: https://c\n"})
	if f, err := Load("/missing.yaml", false, read); err != nil || f.Ziti.URL != "" {
		t.Errorf("missing default file: %v", err)
	}
	if _, err := Load("/missing.yaml", true, read); !errors.Is(err, ErrInvalid) {
		t.Errorf("missing --config file: %v", err)
	}
	if f, err := Load("/cfg.yaml", true, read); err != nil || f.Ziti.URL != "https://c" {
		t.Errorf("load: %v %+v", err, f)
	}
}

func TestDefaultPath(t *testing.T) {
	if got := DefaultPath(env(map[string]string{"HOME": "/home/ops"})); got != "/home/ops/.config/fleetctl/config.yaml" {
		t.Errorf("got %q", got)
	}
	if got := DefaultPath(env(map[string]string{"HOME": "/home/ops", "XDG_CONFIG_HOME": "/x"})); got != "/x/fleetctl/config.yaml" {
		t.Errorf("got %q", got)
	}
	if got := DefaultPath(env(nil)); got != "" {
		t.Errorf("got %q", got)
	}
}

func TestResolveLayers(t *testing.T) {
	file := &File{Path: "/cfg.yaml",
		Ziti:    ZitiFile{URL: "https://file", Username: "file-user", PasswordFile: "/pw.file"},
		Tenancy: TenancyFile{URL: "https://tenancy.file", TokenFile: "/tok.file"}}
	read := files(map[string]string{"/pw.file": "pw-from-file\n", "/tok.file": "tok-from-file\n", "/pw.flag": "pw-from-flag", "/empty": "\n"})

	for _, tc := range []struct {
		name                 string
		env                  map[string]string
		flags                Flags
		url, user, pw, token string
		origin               string
	}{
		{"file only", nil, Flags{}, "https://file", "file-user", "pw-from-file", "tok-from-file", "file /cfg.yaml"},
		{"env beats file", map[string]string{EnvZitiURL: "https://env", EnvZitiUsername: "env-user", EnvZitiPassword: "pw-from-env", EnvTenancyToken: "tok-from-env"},
			Flags{}, "https://env", "env-user", "pw-from-env", "tok-from-env", "env FLEETCTL_ZITI_URL"},
		{"flag beats env", map[string]string{EnvZitiURL: "https://env", EnvZitiPassword: "pw-from-env"},
			Flags{ZitiURL: "https://flag", ZitiPasswordFile: "/pw.flag"}, "https://flag", "file-user", "pw-from-flag", "tok-from-file", "flag --ziti-url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Resolve(file, env(tc.env), tc.flags, read)
			if err != nil {
				t.Fatal(err)
			}
			if s.ZitiURL != tc.url || s.ZitiUsername != tc.user || s.ZitiPassword.Reveal() != tc.pw || s.TenancyToken.Reveal() != tc.token {
				t.Errorf("got url %s user %s pw %s token %s", s.ZitiURL, s.ZitiUsername, s.ZitiPassword.Reveal(), s.TenancyToken.Reveal())
			}
			if s.Origin["ziti.url"] != tc.origin {
				t.Errorf("origin %q, want %q", s.Origin["ziti.url"], tc.origin)
			}
			for k, v := range s.Origin {
				if strings.Contains(v, "pw-from") || strings.Contains(v, "tok-from") {
					t.Errorf("origin of %s holds a secret: %q", k, v)
				}
			}
			if err := s.CheckZiti(); err != nil {
				t.Error(err)
			}
			if err := s.CheckTenancy(); err != nil {
				t.Error(err)
			}
		})
	}

	t.Run("empty secret file", func(t *testing.T) {
		_, err := Resolve(&File{Ziti: ZitiFile{PasswordFile: "/empty"}}, env(nil), Flags{}, read)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "/empty is empty") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("missing secret file", func(t *testing.T) {
		_, err := Resolve(&File{}, env(nil), Flags{TenancyTokenFile: "/nope"}, read)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "tenancy.token") {
			t.Errorf("got %v", err)
		}
	})
}

// The auth method comes from the highest level that names one (flags > env > file): a flag or
// env setting of one method beats a file setting of the other; both methods at one level is a
// configuration error naming both.
func TestResolveAuthMethod(t *testing.T) {
	read := files(map[string]string{"/pw.file": "pw-from-file\n", "/pw.flag": "pw-from-flag"})
	idFile := ZitiFile{Identity: "/id.json"}
	pwFile := ZitiFile{Username: "file-user", PasswordFile: "/pw.file"}
	for _, tc := range []struct {
		name     string
		file     ZitiFile
		env      map[string]string
		flags    Flags
		method   string
		identity string
		user, pw string
		origin   string // of ziti.auth, or the error
		checkErr string // what CheckZiti says, "" when satisfied
	}{
		{name: "nothing", method: "", checkErr: "ziti.url is not set"},
		{name: "file: identity", file: idFile, method: AuthCert, identity: "/id.json",
			origin: "certificate: ziti.identity in the config file /cfg.yaml"},
		{name: "file: password", file: pwFile, method: AuthPassword, user: "file-user", pw: "pw-from-file",
			origin: "password: ziti.username and ziti.password_file in the config file /cfg.yaml"},
		{name: "env username and password beat the file's identity", file: idFile,
			env:    map[string]string{EnvZitiUsername: "env-user", EnvZitiPassword: "pw-from-env"},
			method: AuthPassword, user: "env-user", pw: "pw-from-env",
			origin: "password: FLEETCTL_ZITI_USERNAME and FLEETCTL_ZITI_PASSWORD in the environment, over ziti.identity in the config file /cfg.yaml"},
		{name: "flag username beats the file's identity", file: ZitiFile{Identity: "/id.json", PasswordFile: "/pw.file"},
			flags: Flags{ZitiUsername: "flag-user"}, method: AuthPassword, user: "flag-user", pw: "pw-from-file",
			origin: "password: --ziti-username in flags, over ziti.identity in the config file /cfg.yaml"},
		{name: "flag password file beats the file's identity", file: ZitiFile{Identity: "/id.json", Username: "file-user"},
			flags: Flags{ZitiPasswordFile: "/pw.flag"}, method: AuthPassword, user: "file-user", pw: "pw-from-flag",
			origin: "password: --ziti-password-file in flags, over ziti.identity in the config file /cfg.yaml"},
		{name: "password chosen, username set nowhere", file: idFile, env: map[string]string{EnvZitiPassword: "pw-from-env"},
			method: AuthPassword, pw: "pw-from-env", origin: "password: FLEETCTL_ZITI_PASSWORD in the environment, over ziti.identity in the config file /cfg.yaml",
			checkErr: "password auth (password: FLEETCTL_ZITI_PASSWORD in the environment, over ziti.identity in the config file /cfg.yaml) needs ziti.username"},
		{name: "env identity beats the file's password", file: pwFile, env: map[string]string{EnvZitiIdentity: "/env-id.json"},
			method: AuthCert, identity: "/env-id.json",
			origin: "certificate: FLEETCTL_ZITI_IDENTITY in the environment, over ziti.username and ziti.password_file in the config file /cfg.yaml"},
		{name: "flag identity beats env password", env: map[string]string{EnvZitiUsername: "env-user", EnvZitiPassword: "pw-from-env"},
			flags: Flags{ZitiIdentity: "/flag-id.json"}, method: AuthCert, identity: "/flag-id.json",
			origin: "certificate: --ziti-identity in flags, over FLEETCTL_ZITI_USERNAME and FLEETCTL_ZITI_PASSWORD in the environment"},
		{name: "under cert auth the password file is not read", file: ZitiFile{Username: "u", PasswordFile: "/missing"},
			env: map[string]string{EnvZitiIdentity: "/env-id.json"}, method: AuthCert, identity: "/env-id.json",
			origin: "certificate: FLEETCTL_ZITI_IDENTITY in the environment, over ziti.username and ziti.password_file in the config file /cfg.yaml"},
		{name: "both in flags", flags: Flags{ZitiIdentity: "/id.json", ZitiUsername: "u", ZitiPasswordFile: "/pw.flag"},
			origin: "certificate auth (--ziti-identity) and password auth (--ziti-username and --ziti-password-file) are both given in flags; keep one"},
		{name: "both in env", file: idFile, env: map[string]string{EnvZitiIdentity: "/e.json", EnvZitiPassword: "pw"},
			origin: "certificate auth (FLEETCTL_ZITI_IDENTITY) and password auth (FLEETCTL_ZITI_PASSWORD) are both given in the environment; keep one"},
		{name: "both in the file", file: ZitiFile{Identity: "/id.json", Username: "u"},
			origin: "certificate auth (ziti.identity) and password auth (ziti.username) are both given in the config file /cfg.yaml; keep one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := &File{Path: "/cfg.yaml", Ziti: tc.file}
			s, err := Resolve(file, env(tc.env), tc.flags, read)
			if tc.method == "" && tc.checkErr == "" {
				if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.origin) {
					t.Fatalf("got %v, want an error %q", err, tc.origin)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.ZitiAuth != tc.method || s.ZitiIdentity != tc.identity || s.ZitiUsername != tc.user || s.ZitiPassword.Reveal() != tc.pw {
				t.Errorf("got method %q identity %q user %q pw %q", s.ZitiAuth, s.ZitiIdentity, s.ZitiUsername, s.ZitiPassword.Reveal())
			}
			if s.Origin["ziti.auth"] != tc.origin {
				t.Errorf("origin %q\n  want %q", s.Origin["ziti.auth"], tc.origin)
			}
			s.ZitiURL = "https://c"
			if tc.method == "" {
				s.ZitiURL = ""
			}
			err = s.CheckZiti()
			switch {
			case tc.checkErr == "" && err != nil:
				t.Errorf("check: %v", err)
			case tc.checkErr != "" && (err == nil || !strings.Contains(err.Error(), tc.checkErr)):
				t.Errorf("check: %v, want %q", err, tc.checkErr)
			}
		})
	}
}

func TestChecks(t *testing.T) {
	for _, tc := range []struct {
		name          string
		s             Settings
		zitiErr, tErr string
	}{
		{"nothing", Settings{}, "ziti.url is not set", "tenancy.url is not set"},
		{"no ziti creds", Settings{ZitiURL: "https://c", TenancyURL: "https://t"}, "no ziti credentials", "no tenancy admin token"},
		{"identity is enough", Settings{ZitiURL: "https://c", ZitiIdentity: "/id.json"}, "", "tenancy.url"},
		// The identity file names the controller.
		{"identity without url", Settings{ZitiIdentity: "/id.json", TenancyURL: "https://t"}, "", "no tenancy admin token"},
		{"password without a password", Settings{ZitiURL: "https://c", ZitiAuth: AuthPassword, ZitiUsername: "u",
			Origin: map[string]string{"ziti.auth": "password: ziti.username in the config file /c"}}, "password auth (password: ziti.username in the config file /c) needs a password", "tenancy.url"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, c := range []struct {
				err  error
				want string
			}{{tc.s.CheckZiti(), tc.zitiErr}, {tc.s.CheckTenancy(), tc.tErr}} {
				if c.want == "" {
					if c.err != nil {
						t.Error(c.err)
					}
					continue
				}
				if c.err == nil || !strings.Contains(c.err.Error(), c.want) || !errors.Is(c.err, ErrInvalid) {
					t.Errorf("got %v, want %q", c.err, c.want)
				}
			}
		})
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("ziti:\n  url: https://c\n  username: u\ntenancy:\n  url: https://t\n"))
	f.Add([]byte("ziti: ~\n"))
	f.Add([]byte("ziti:\n  password: x\n"))
	f.Add([]byte("- 1\n- 2\n"))
	f.Add([]byte("ziti: &a\n  url: *a\n"))
	f.Add([]byte("ziti:\n  url: \"123\"\n  identity: id.json\n  ca_file: /etc/ca.pem\ntenancy:\n  token_file: ../t\nexporter:\n  listen: ~\n"))
	f.Add([]byte("ziti:\n  url: 123\n"))
	f.Add([]byte("tenancy:\n  url: ' https://t '\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := Parse(b, "/c/config.yaml")
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error without ErrInvalid: %v", err)
			}
			return
		}
		if cfg == nil {
			t.Fatal("nil config without error")
		}
		// Every value accepted is the file's string under that very key; the file paths are
		// absolute, relative ones taken from the config's directory; no other key has a value.
		var doc map[string]map[string]any
		if err := yaml.Unmarshal(b, &doc); err != nil {
			t.Fatalf("accepted a file yaml.Unmarshal refuses (%v): %q", err, b)
		}
		got := cfg.keys()
		paths := map[string]bool{"ziti.password_file": true, "ziti.identity": true, "ziti.ca_file": true, "tenancy.token_file": true}
		for section, kv := range doc {
			for k, v := range kv {
				key := section + "." + k
				dest, ok := got[key]
				if !ok {
					t.Fatalf("accepted unknown key %q: %q", key, b)
				}
				want, _ := v.(string)
				if paths[key] && want != "" && !filepath.IsAbs(want) {
					want = filepath.Join("/c", want)
				}
				if *dest != want {
					t.Fatalf("%s = %q, the file says %#v", key, *dest, v)
				}
				delete(got, key)
			}
		}
		for key, dest := range got {
			if *dest != "" {
				t.Fatalf("%s = %q, which the file does not set: %q", key, *dest, b)
			}
		}
		if cfg.Path != "/c/config.yaml" {
			t.Fatalf("path %q", cfg.Path)
		}
	})
}
