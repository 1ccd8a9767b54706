package doctor

import "golang.org/x/sys/unix"

// hasACL reports whether path carries a POSIX access ACL.
func hasACL(path string) bool {
	n, err := unix.Getxattr(path, "system.posix_acl_access", nil)
	return err == nil && n > 0
}
