package config

// The config's names are checked by hand, not by regular expressions: compiling those at init
// cost every run of monky-deployd, `version` included, ~80 KiB of heap and ~0.3M instructions
// (issue 24: the process floor). names_test.go checks each against the expression it replaces.

// isSafeName: `^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$` — env_id names directories, the compose
// project and ziti identities (a DNS label).
func isSafeName(s string) bool {
	if len(s) < 1 || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(isLowerAlnum(c) || c == '-') {
			return false
		}
	}
	return true
}

// isProjectName: `^[a-z0-9][a-z0-9_-]*$`, docker compose's own rule for project names.
func isProjectName(s string) bool {
	if s == "" || !isLowerAlnum(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !(isLowerAlnum(c) || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// isMountPath: `^[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$`, an OpenBao mount path: segments of these
// characters, no leading, trailing or doubled slash.
func isMountPath(s string) bool {
	seg := 0 // length of the segment so far
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '/':
			if seg == 0 {
				return false
			}
			seg = 0
		case isLowerAlnum(c) || c >= 'A' && c <= 'Z' || c == '_' || c == '.' || c == '-':
			seg++
		default:
			return false
		}
	}
	return seg > 0
}

// isAccountName: `^[a-z_][a-z0-9_-]{0,30}\$?$`, an account name as useradd and systemd's User=
// take one.
func isAccountName(s string) bool {
	if s != "" && s[len(s)-1] == '$' {
		s = s[:len(s)-1]
	}
	if len(s) < 1 || len(s) > 31 || !(s[0] >= 'a' && s[0] <= 'z' || s[0] == '_') {
		return false
	}
	for i := 1; i < len(s); i++ {
		if c := s[i]; !(isLowerAlnum(c) || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func isLowerAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
