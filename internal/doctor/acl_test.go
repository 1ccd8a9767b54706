package doctor

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

const undefinedID = 0xFFFFFFFF

func userEntry(uid uint32, perm fs.FileMode) ACLEntry {
	return ACLEntry{Tag: aclUser, Perm: perm, ID: uid}
}

func groupEntry(gid uint32, perm fs.FileMode) ACLEntry {
	return ACLEntry{Tag: aclGroup, Perm: perm, ID: gid}
}

// aclOf is an access ACL as setfacl leaves it: owner, one named entry, owning group, mask and
// other.
func aclOf(userObj fs.FileMode, named ACLEntry, groupObj, mask, other fs.FileMode) []ACLEntry {
	return []ACLEntry{
		{Tag: aclUserObj, Perm: userObj, ID: undefinedID},
		named,
		{Tag: aclGroupObj, Perm: groupObj, ID: undefinedID},
		{Tag: aclMask, Perm: mask, ID: undefinedID},
		{Tag: aclOther, Perm: other, ID: undefinedID},
	}
}

// encodeACL writes entries in the xattr format the kernel hands out.
func encodeACL(version uint32, entries []ACLEntry) []byte {
	b := binary.LittleEndian.AppendUint32(nil, version)
	for _, e := range entries {
		b = binary.LittleEndian.AppendUint16(b, e.Tag)
		b = binary.LittleEndian.AppendUint16(b, uint16(e.Perm))
		b = binary.LittleEndian.AppendUint32(b, e.ID)
	}
	return b
}

func TestParseACL(t *testing.T) {
	good := aclOf(6, userEntry(998, 6), 4, 6, 0)
	minimal := []ACLEntry{{Tag: aclUserObj, Perm: 6}, {Tag: aclGroupObj, Perm: 4}, {Tag: aclOther, Perm: 4}}
	for _, tc := range []struct {
		name string
		raw  []byte
		want string // error substring; "" for success
	}{
		{"setfacl's shape", encodeACL(2, good), ""},
		{"minimal", encodeACL(2, minimal), ""},
		{"empty", nil, "shorter than its 4-byte header"},
		{"version 1", encodeACL(1, good), "version 1, want 2"},
		{"torn entry", encodeACL(2, good)[:13], "not a whole number"},
		{"unknown tag", encodeACL(2, append(append([]ACLEntry{}, minimal...), ACLEntry{Tag: 0x40})), "entry 3: tag 0x40"},
		{"perm beyond rwx", encodeACL(2, append(append([]ACLEntry{}, minimal...), ACLEntry{Tag: aclMask, Perm: 0o10})), "entry 3: permission 010"},
		{"no owner", encodeACL(2, minimal[1:]), "0 owner (USER_OBJ) entries"},
		{"two others", encodeACL(2, append(append([]ACLEntry{}, minimal...), minimal[2])), "2 other (OTHER) entries"},
		{"named without a mask", encodeACL(2, append(append([]ACLEntry{}, minimal...), userEntry(5, 7))), "without a mask"},
		{"two masks", encodeACL(2, append(append([]ACLEntry{}, good...), ACLEntry{Tag: aclMask})), "2 mask entries"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseACL(tc.raw)
			if tc.want != "" {
				if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), aclXattr) {
					t.Fatalf("parseACL = %v, %v; want an error naming %s with %q", got, err, aclXattr, tc.want)
				}
				return
			}
			if err != nil || len(got) != (len(tc.raw)-4)/8 {
				t.Fatalf("parseACL = %v, %v", got, err)
			}
		})
	}
	got, _ := parseACL(encodeACL(2, good))
	if got[1] != userEntry(998, 6) {
		t.Errorf("named entry %+v", got[1])
	}
}

func FuzzParseACL(f *testing.F) {
	f.Add(encodeACL(2, aclOf(6, userEntry(998, 6), 4, 6, 0)))
	f.Add(encodeACL(2, []ACLEntry{{Tag: aclUserObj, Perm: 6}, {Tag: aclGroupObj, Perm: 4}, {Tag: aclOther, Perm: 4}}))
	f.Add([]byte{2, 0, 0, 0})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, raw []byte) {
		entries, err := parseACL(raw)
		if err != nil {
			if !strings.HasPrefix(err.Error(), aclXattr+": ") {
				t.Errorf("error %q does not name %s", err, aclXattr)
			}
			return
		}
		if len(entries) < 3 || len(raw) != 4+8*len(entries) {
			t.Fatalf("accepted %d entries from %d bytes", len(entries), len(raw))
		}
		// Whatever it accepted can be evaluated without a panic, and root is never refused.
		fi := FileInfo{Mode: 0o640, UID: 1, GID: 2, ACL: true, ACLEntries: entries}
		aclAllows(Account{UID: 3, GIDs: []uint32{2, 4}}, fi, entries, permR)
		if ok, _ := aclAllows(Account{UID: 0}, fi, entries, permW); !ok {
			t.Error("root refused")
		}
	})
}

// POSIX.1e's access check: owner, named user (masked), any matching group (masked), other.
func TestACLAllows(t *testing.T) {
	agent := Account{Name: "monky-deployd", UID: 998, GIDs: []uint32{998, 105}}
	for _, tc := range []struct {
		name   string
		fi     FileInfo
		want   fs.FileMode
		ok     bool
		byName bool
	}{
		{"named user", FileInfo{Mode: 0o660, ACLEntries: aclOf(6, userEntry(998, 6), 0, 6, 0)}, permW, true, true},
		{"named user, masked", FileInfo{Mode: 0o640, ACLEntries: aclOf(6, userEntry(998, 6), 0, 4, 0)}, permW, false, false},
		{"named user beats a group that grants", FileInfo{Mode: 0o660, GID: 105, ACLEntries: aclOf(6, userEntry(998, 4), 6, 6, 0)}, permW, false, false},
		{"the owner entry beats a named one", FileInfo{Mode: 0o460, UID: 998, ACLEntries: aclOf(4, userEntry(998, 6), 6, 6, 6)}, permW, false, false},
		{"named group", FileInfo{Mode: 0o660, ACLEntries: aclOf(6, groupEntry(105, 6), 0, 6, 0)}, permW, true, true},
		{"owning group entry, not the mask in the mode", FileInfo{Mode: 0o660, GID: 105, ACLEntries: aclOf(6, userEntry(7, 6), 0, 6, 6)}, permW, false, false},
		{"a matching group that denies shuts out other", FileInfo{Mode: 0o606, ACLEntries: aclOf(6, groupEntry(105, 0), 0, 0, 6)}, permW, false, false},
		{"no entry matches: other", FileInfo{Mode: 0o666, ACLEntries: aclOf(6, userEntry(7, 0), 0, 6, 6)}, permW, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.fi.ACL = true
			ok, byName := aclAllows(agent, tc.fi, tc.fi.ACLEntries, tc.want)
			if ok != tc.ok || byName != tc.byName {
				t.Errorf("aclAllows = %t, %t; want %t, %t", ok, byName, tc.ok, tc.byName)
			}
		})
	}
}

// OSStat reads and parses a real ACL where the filesystem keeps them.
func TestOSStatReadsTheACL(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sock")
	if err := os.WriteFile(p, nil, 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, 0o640); err != nil {
		t.Fatal(err)
	}
	entries := aclOf(6, userEntry(4242, 6), 4, 6, 0)
	if err := unix.Setxattr(p, aclXattr, encodeACL(2, entries), 0); err != nil {
		if errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EOPNOTSUPP) {
			t.Skipf("no POSIX ACLs here: %v", err)
		}
		t.Fatal(err)
	}
	fi, err := OSStat(p)
	if err != nil || !fi.ACL || fi.ACLErr != nil || len(fi.ACLEntries) != 5 || fi.ACLEntries[1] != userEntry(4242, 6) {
		t.Fatalf("OSStat = %+v, %v", fi, err)
	}
	if ok, _ := aclAllows(Account{UID: 4242}, fi, fi.ACLEntries, permW); !ok {
		t.Error("the named user is refused")
	}
}
