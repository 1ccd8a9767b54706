package registryauth

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

const harbor = "harbor.tikali.net"

func TestParse(t *testing.T) {
	cases := []struct {
		name                 string
		value                string
		def                  string
		registry, user, pass string
	}{
		{"json with registry", `{"registry":"reg.example:5000","username":"robot$pull","password":"p4ss"}`, harbor, "reg.example:5000", "robot$pull", "p4ss"},
		{"json without registry takes the default", `{"username":"robot$pull","password":"p4ss"}`, harbor, harbor, "robot$pull", "p4ss"},
		{"json null registry takes the default", `{"registry":null,"username":"u","password":"p"}`, harbor, harbor, "u", "p"},
		{"json empty registry takes the default", `{"registry":"","username":"u","password":"p"}`, harbor, harbor, "u", "p"},
		{"json extra fields ignored", `{"username":"u","password":"p","email":"x@y"}`, harbor, harbor, "u", "p"},
		{"json password with colon", `{"username":"u","password":"a:b:c"}`, harbor, harbor, "u", "a:b:c"},
		{"json surrounded by whitespace", "\n  {\"username\":\"u\",\"password\":\"p\"}\n", harbor, harbor, "u", "p"},
		{"user:pass", "robot$pull:p4ss", harbor, harbor, "robot$pull", "p4ss"},
		{"user:pass trailing newline", "robot$pull:p4ss\n", harbor, harbor, "robot$pull", "p4ss"},
		{"colon in password splits at the first", "robot$pull:p4:ss", "h", "h", "robot$pull", "p4:ss"},
		{"password that looks like json", `u:{"x":1}`, harbor, harbor, "u", `{"x":1}`},
		{"json registry with a scheme and path", `{"registry":"https://index.docker.io/v1/","username":"u","password":"p"}`, "", "https://index.docker.io/v1/", "u", "p"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Parse(secret.New(tc.value), tc.def)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if a.Registry != tc.registry || a.Username != tc.user || a.Password.Reveal() != tc.pass {
				t.Errorf("got (%q, %q, password of %d bytes), want (%q, %q, %d bytes)",
					a.Registry, a.Username, len(a.Password.Reveal()), tc.registry, tc.user, len(tc.pass))
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	const pw = "Sup3r-Secret-Pw" // must never appear in an error
	cases := []struct {
		name, value, def, want string
	}{
		{"empty", "", harbor, "empty"},
		{"blank", "  \n\t", harbor, "empty"},
		{"no colon", "no-colon-" + pw, harbor, "neither"},
		{"json without username", `{"password":"` + pw + `"}`, harbor, "username is empty"},
		{"json without password", `{"username":"u"}`, harbor, "password is empty"},
		{"broken json", `{"username":"u","password":"` + pw, harbor, "not a JSON object"},
		{"password given twice", `{"username":"u","password":"x` + pw + `","password":"` + pw + `"}`, harbor, `"password" is given twice`},
		{"PASSWORD in capitals only", `{"username":"u","PASSWORD":"` + pw + `"}`, harbor, "password is empty"},
		{"json with trailing data", `{"username":"u","password":"` + pw + `"} x`, harbor, "trailing"},
		{"json username not a string", `{"username":1,"password":"` + pw + `"}`, harbor, `"username" is not a string`},
		{"json password not a string", `{"username":"u","password":["` + pw + `"]}`, harbor, `"password" is not a string`},
		{"json registry not a string", `{"registry":{},"username":"u","password":"` + pw + `"}`, harbor, `"registry" is not a string`},
		{"empty username", ":" + pw, harbor, "username is empty"},
		{"empty password", "user:", harbor, "password is empty"},
		{"no registry anywhere", "u:" + pw, "", "no registry"},
		{"username with colon", `{"username":"a:b","password":"` + pw + `"}`, harbor, "username contains a colon"},
		{"username with newline", `{"username":"a\nb","password":"` + pw + `"}`, harbor, "control character"},
		{"registry with space", `{"registry":"a b","username":"u","password":"` + pw + `"}`, harbor, "registry contains whitespace"},
		{"default registry with space", "u:" + pw, "bad host", "registry contains whitespace"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, err := Parse(secret.New(tc.value), tc.def)
			if err == nil {
				t.Fatalf("Parse accepted it: %+v", a)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
			if strings.Contains(err.Error(), pw) || strings.Contains(err.Error(), "Secret") {
				t.Errorf("error leaks the password: %q", err)
			}
		})
	}
}

func TestAuthDoesNotPrintThePassword(t *testing.T) {
	a, err := Parse(secret.New("u:Sup3r-Secret-Pw"), harbor)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{fmt.Sprint(a), fmt.Sprintf("%+v", a), fmt.Sprintf("%#v", a)} {
		if strings.Contains(s, "Sup3r") {
			t.Errorf("formatted Auth leaks the password: %s", s)
		}
	}
}

func TestWriteDockerConfig(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "state", "docker")
	a, err := Parse(secret.New("robot$pull:p4:ss"), harbor)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteDockerConfig(dir, a); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, ConfigFile)
	first, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Auths map[string]struct {
			Auth string `json:"auth"`
		} `json:"auths"`
	}
	if err := json.Unmarshal(first, &doc); err != nil {
		t.Fatalf("config.json is not JSON: %v", err)
	}
	if len(doc.Auths) != 1 {
		t.Fatalf("auths has %d entries, want 1", len(doc.Auths))
	}
	dec, err := base64.StdEncoding.DecodeString(doc.Auths[harbor].Auth)
	if err != nil {
		t.Fatal(err)
	}
	if string(dec) != "robot$pull:p4:ss" {
		t.Errorf("decoded auth is not user:password (%d bytes)", len(dec))
	}
	assertMode(t, dir, 0o700)
	assertMode(t, p, 0o600)

	// idempotent: the agent rewrites it on every apply
	if err := WriteDockerConfig(dir, a); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(p)
	if string(first) != string(second) {
		t.Error("a second write of the same credential changed the file")
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("dir holds %d entries, want only %s", len(ents), ConfigFile)
	}
}

func TestWriteDockerConfigForcesModesAndReplaces(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "docker")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, ConfigFile)
	// A config left by someone else, with a credsStore that would send docker elsewhere.
	if err := os.WriteFile(p, []byte(`{"credsStore":"desktop","auths":{"old.example":{"auth":"eDp5"}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	a := Auth{Registry: harbor, Username: "u", Password: secret.New("p")}
	if err := WriteDockerConfig(dir, a); err != nil {
		t.Fatal(err)
	}
	assertMode(t, dir, 0o700)
	assertMode(t, p, 0o600)
	got, _ := os.ReadFile(p)
	if strings.Contains(string(got), "credsStore") || strings.Contains(string(got), "old.example") {
		t.Errorf("old content survived: %s", got)
	}
}

func TestWriteDockerConfigRefusesIncomplete(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "docker")
	for _, a := range []Auth{
		{Username: "u", Password: secret.New("p")},
		{Registry: harbor, Password: secret.New("p")},
		{Registry: harbor, Username: "u"},
	} {
		if err := WriteDockerConfig(dir, a); err == nil {
			t.Errorf("WriteDockerConfig(%+v) succeeded", a)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("refused write still created %s", dir)
	}
}

func assertMode(t *testing.T, p string, want os.FileMode) {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != want {
		t.Errorf("%s: mode %v, want %v", p, st.Mode().Perm(), want)
	}
}

// marker is spliced into fuzzed values where a password would sit; no error may contain it.
const marker = "QX7-PASSWORD-MARKER-7XQ"

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`{"registry":"r","username":"u","password":"p"}`, `{"username":"u","password":"p"}`,
		"u:p", "u:p:q", ":", "", "{", `{"username":1}`, `{"password":null}`, "u:\x00", "\xff:\xfe",
		`{"username":"u","password":"p"}{}`, `{"a":{"b":[1,2,{"c":"d"}]}}`,
	} {
		f.Add(s, harbor)
	}
	f.Add("u:p", "")
	f.Fuzz(func(t *testing.T, value, def string) {
		check := func(v string) {
			a, err := Parse(secret.New(v), def)
			if err != nil {
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("error does not wrap ErrInvalid: %v", err)
				}
				if strings.Contains(err.Error(), marker) {
					t.Fatalf("error leaks the password: %q", err)
				}
				return
			}
			if a.Registry == "" || a.Username == "" || a.Password.Empty() || strings.Contains(a.Username, ":") {
				t.Fatalf("accepted an unusable credential: registry %q user %q", a.Registry, a.Username)
			}
		}
		check(value)
		check(value + marker)
		check("u:" + marker + value)
		check(`{"username":"u","password":"` + marker + value)
		check(`{"password":"` + marker + `",` + value)
		check(`{"password":"` + marker + `","username":` + value + `}`)
	})
}

func TestReadDockerConfig(t *testing.T) {
	dir := t.TempDir()
	if got, err := ReadDockerConfig(dir); err != nil || got != nil {
		t.Fatalf("no config: %v %v", got, err)
	}
	a := Auth{Registry: "registry.example:5000", Username: "puller", Password: secret.New("pa:ss-w0rd")}
	if err := WriteDockerConfig(dir, a); err != nil {
		t.Fatal(err)
	}
	got, err := ReadDockerConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	var plain []string
	for _, v := range got {
		plain = append(plain, v.Reveal())
	}
	want := []string{a.Encoded().Reveal(), "pa:ss-w0rd"}
	if !slices.Equal(plain, want) {
		t.Errorf("secrets %q, want %q", plain, want)
	}
	// A config that is not JSON is an error that never quotes it.
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(`{"auths": {"r": {"auth": "c2VjcmV0LXRleHQ=`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadDockerConfig(dir); err == nil || strings.Contains(err.Error(), "c2VjcmV0") {
		t.Errorf("a broken config: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), bytes.Repeat([]byte(" "), maxConfigBytes+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadDockerConfig(dir); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("an oversized config: %v", err)
	}
	// A FIFO in its place is refused at once: a plain open would wait for a writer.
	if err := os.Remove(filepath.Join(dir, ConfigFile)); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, ConfigFile), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadDockerConfig(dir); err == nil || !strings.Contains(err.Error(), "not a regular file (fifo)") {
		t.Errorf("a FIFO in the config's place: %v", err)
	}
}
