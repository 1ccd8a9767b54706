//go:build !linux

package doctor

// hasACL finds no ACL where POSIX ACLs are not read (the agent runs on Linux).
func hasACL(string) bool { return false }
