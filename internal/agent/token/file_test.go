package token

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

const tok = "s.Zq9SecretTokenValue"

func TestReadToken(t *testing.T) {
	cases := []struct {
		name, content, want string
		absent              bool
	}{
		{name: "missing", absent: true, want: ""},
		{name: "plain", content: tok, want: tok},
		{name: "trailing newline", content: tok + "\n", want: tok},
		{name: "surrounding whitespace", content: "  " + tok + "\r\n\n", want: tok},
		{name: "empty file", content: "", want: ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "bao.token")
			if !tc.absent {
				if err := os.WriteFile(p, []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			v, err := Read(p)
			if err != nil {
				t.Fatal(err)
			}
			if v.Reveal() != tc.want {
				t.Errorf("got %d bytes, want %d", len(v.Reveal()), len(tc.want))
			}
		})
	}
}

func TestReadTokenUnreadable(t *testing.T) {
	if _, err := Read(t.TempDir()); err == nil {
		t.Error("reading a directory as the token succeeded")
	}
}

func TestWriteToken(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "bao.token")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, secret.New(tok)); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}
	v, err := Read(p)
	if err != nil || v.Reveal() != tok {
		t.Errorf("read back %d bytes, %v", len(v.Reveal()), err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("%d entries, want only bao.token", len(ents))
	}
}

func TestWriteTokenRefuses(t *testing.T) {
	for name, v := range map[string]string{
		"empty":    "",
		"space":    "s.abc " + tok,
		"newline":  tok + "\n" + tok,
		"control":  tok + "\x00",
		"trailing": tok + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "bao.token")
			err := Write(p, secret.New(v))
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.Contains(err.Error(), "Zq9Secret") {
				t.Errorf("error leaks the token: %q", err)
			}
			if _, serr := os.Stat(p); !os.IsNotExist(serr) {
				t.Error("a refused token was written")
			}
		})
	}
}

func TestRemoveToken(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bao.token")
	if err := Remove(p); err != nil {
		t.Errorf("removing a missing token: %v", err)
	}
	if err := Write(p, secret.New(tok)); err != nil {
		t.Fatal(err)
	}
	if err := Remove(p); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("token still there: %v", err)
	}
	v, err := Read(p)
	if err != nil || !v.Empty() {
		t.Errorf("after removal: %v, empty=%v", err, v.Empty())
	}
}

func TestSupersedeToken(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "bao.token")
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	if got, err := Supersede(p, now); got != "" || err != nil {
		t.Fatalf("no token: %q, %v", got, err)
	}
	for i, tok := range []string{"s.first", "s.second"} { // a second refusal replaces the first
		if err := os.WriteFile(p, []byte(tok+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := Supersede(p, now.Add(time.Duration(i)*time.Hour))
		if err != nil || got != p+".superseded" {
			t.Fatalf("Supersede = %q, %v", got, err)
		}
		b, _ := os.ReadFile(got)
		fi, _ := os.Stat(got)
		if string(b) != tok+"\n" || fi.Mode().Perm() != 0o600 || !fi.ModTime().Equal(now.Add(time.Duration(i)*time.Hour)) {
			t.Errorf("%s: %q mode %v mtime %v", got, b, fi.Mode(), fi.ModTime())
		}
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Error("the token file is still there")
		}
	}
}
