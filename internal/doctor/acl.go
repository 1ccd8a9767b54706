package doctor

import (
	"encoding/binary"
	"fmt"
	"io/fs"
)

// aclXattr is the extended attribute a POSIX access ACL is stored in.
const aclXattr = "system.posix_acl_access"

// ACL tags, as the kernel's xattr format numbers them (linux/posix_acl.h).
const (
	aclUserObj  = 0x01
	aclUser     = 0x02
	aclGroupObj = 0x04
	aclGroup    = 0x08
	aclMask     = 0x10
	aclOther    = 0x20
)

// aclVersion is the only version of the xattr format (POSIX_ACL_XATTR_VERSION).
const aclVersion = 2

// ACLEntry is one entry of a POSIX access ACL: a tag (owner, named user, owning group, named
// group, mask, other), its rwx bits and, for a named user or group, its uid or gid.
type ACLEntry struct {
	Tag  uint16
	Perm fs.FileMode
	ID   uint32
}

// parseACL reads the value of system.posix_acl_access: a 4-byte little-endian header (version
// 2), then 8-byte entries of tag (u16), perm (u16) and id (u32). It refuses what the kernel would
// never hand out — another version, a torn entry, an unknown tag or permission bit, a missing or
// repeated owner, group or other entry, named entries without a mask — with an error naming the
// attribute and the entry.
func parseACL(b []byte) ([]ACLEntry, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%s: %d bytes, shorter than its 4-byte header", aclXattr, len(b))
	}
	if v := binary.LittleEndian.Uint32(b); v != aclVersion {
		return nil, fmt.Errorf("%s: version %d, want %d", aclXattr, v, aclVersion)
	}
	body := b[4:]
	if len(body)%8 != 0 {
		return nil, fmt.Errorf("%s: %d bytes of entries, not a whole number of 8-byte entries", aclXattr, len(body))
	}
	entries := make([]ACLEntry, 0, len(body)/8)
	count := map[uint16]int{}
	for i := 0; i < len(body); i += 8 {
		e := ACLEntry{
			Tag:  binary.LittleEndian.Uint16(body[i:]),
			Perm: fs.FileMode(binary.LittleEndian.Uint16(body[i+2:])),
			ID:   binary.LittleEndian.Uint32(body[i+4:]),
		}
		n := i / 8
		switch e.Tag {
		case aclUserObj, aclUser, aclGroupObj, aclGroup, aclMask, aclOther:
		default:
			return nil, fmt.Errorf("%s: entry %d: tag %#x is not a POSIX ACL tag", aclXattr, n, e.Tag)
		}
		if e.Perm&^7 != 0 {
			return nil, fmt.Errorf("%s: entry %d: permission %#o has bits beyond rwx", aclXattr, n, e.Perm)
		}
		count[e.Tag]++
		entries = append(entries, e)
	}
	for _, t := range []struct {
		tag  uint16
		name string
	}{{aclUserObj, "owner (USER_OBJ)"}, {aclGroupObj, "owning group (GROUP_OBJ)"}, {aclOther, "other (OTHER)"}} {
		if count[t.tag] != 1 {
			return nil, fmt.Errorf("%s: %d %s entries, want exactly 1", aclXattr, count[t.tag], t.name)
		}
	}
	switch {
	case count[aclMask] > 1:
		return nil, fmt.Errorf("%s: %d mask entries, want at most 1", aclXattr, count[aclMask])
	case count[aclMask] == 0 && count[aclUser]+count[aclGroup] > 0:
		return nil, fmt.Errorf("%s: named user or group entries without a mask entry", aclXattr)
	}
	return entries, nil
}

// aclAllows evaluates a POSIX access ACL for a, as the kernel does (posix_acl_permission): the
// owner entry when a owns the file; else a named user entry for a's uid, limited by the mask;
// else every group entry (owning group and named groups) matching one of a's groups, each
// limited by the mask, granting when any grants all of want — and denying when some match but
// none grants; else other. Root is allowed everything. The owner, other and mask bits are taken
// from the mode, which the kernel keeps equal to those entries. byName reports that the grant
// came from a named user or group entry: what the mode bits alone do not show.
func aclAllows(a Account, fi FileInfo, entries []ACLEntry, want fs.FileMode) (ok, byName bool) {
	if a.UID == 0 {
		return true, false
	}
	perm := fi.Mode.Perm()
	mask := fs.FileMode(7)
	hasMask := false
	for _, e := range entries {
		if e.Tag == aclMask {
			hasMask, mask = true, perm>>3&7
		}
	}
	if fi.UID == a.UID {
		return perm>>6&7&want == want, false
	}
	for _, e := range entries {
		if e.Tag == aclUser && e.ID == a.UID {
			ok := e.Perm&mask&want == want
			return ok, ok
		}
	}
	matched := false
	for _, e := range entries {
		var bits fs.FileMode
		switch {
		case e.Tag == aclGroupObj && a.InGroup(fi.GID):
			bits = e.Perm
			if !hasMask {
				bits = perm >> 3 & 7
			}
		case e.Tag == aclGroup && a.InGroup(e.ID):
			bits = e.Perm
		default:
			continue
		}
		matched = true
		if bits&mask&want == want {
			return true, e.Tag == aclGroup
		}
	}
	if matched {
		return false, false
	}
	return perm&7&want == want, false
}
