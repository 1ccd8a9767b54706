//go:build !linux

package doctor

// hasACL is false where POSIX ACLs are not read (the agent runs on Linux).
func hasACL(string) bool { return false }
