package config

import (
	"regexp"
	"testing"
)

// The expressions the hand-written checks replace (names.go).
var (
	safeNameRe    = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	projectNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)
	mountPathRe   = regexp.MustCompile(`^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$`)
	accountNameRe = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,30}\$?$`)
)

var nameSeeds = []string{
	"", "a", "-", "a-", "-a", "env-qa-02", "Env", "a_b", "a.b", "a/b", "/a", "a/", "a//b", "kv", "secret/data",
	"monky-env-qa-02", "0", "_", "_a", "a$", "$", "a$$", "root", "a b", "é", "a\n", "a\x00",
	"abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz0",  // 63
	"abcdefghijklmnopqrstuvwxyz0123456789abcdefghijklmnopqrstuvwxyz01", // 64
	"abcdefghijklmnopqrstuvwxyz01234", "abcdefghijklmnopqrstuvwxyz012345", "abcdefghijklmnopqrstuvwxyz01234$",
	"abcdefghijklmnopqrstuvwxyz012345$", "a.-_/B.9", "..", "a/./b",
}

func checkNames(t *testing.T, s string) {
	for _, c := range []struct {
		name string
		re   *regexp.Regexp
		fn   func(string) bool
	}{
		{"safeName", safeNameRe, isSafeName},
		{"projectName", projectNameRe, isProjectName},
		{"mountPath", mountPathRe, isMountPath},
		{"accountName", accountNameRe, isAccountName},
	} {
		if got, want := c.fn(s), c.re.MatchString(s); got != want {
			t.Errorf("%s(%q) = %v, the expression says %v", c.name, s, got, want)
		}
	}
}

func TestNamesAsTheExpressions(t *testing.T) {
	for _, s := range nameSeeds {
		checkNames(t, s)
	}
}

func FuzzNamesAsTheExpressions(f *testing.F) {
	for _, s := range nameSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) { checkNames(t, s) })
}
