package doctor

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"strconv"
	"syscall"
)

// OSStat is Env.Stat on the real filesystem: os.Stat plus owner, group and ACL presence.
func OSStat(path string) (FileInfo, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return FileInfo{}, err
	}
	out := FileInfo{Mode: fi.Mode()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		out.UID, out.GID = st.Uid, st.Gid
		out.Dev = uint64(st.Dev) // st_dev is uint64 on linux/amd64, narrower or signed elsewhere
	}
	out.ACL = hasACL(path)
	return out, nil
}

// CurrentAccount is the process's effective user (Name and UID).
func CurrentAccount() Account {
	uid := uint32(os.Geteuid())
	a := Account{UID: uid, Name: strconv.FormatUint(uint64(uid), 10)}
	if u, err := user.LookupId(a.Name); err == nil {
		a.Name = u.Username
	}
	return a
}

// LookupAccount finds a user and every group it is a member of.
func LookupAccount(name string) (Account, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return Account{}, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return Account{}, fmt.Errorf("user %s: uid %q is not a number", name, u.Uid)
	}
	a := Account{Name: u.Username, UID: uint32(uid)}
	ids, err := u.GroupIds()
	if err != nil {
		ids = []string{u.Gid}
	}
	if len(ids) == 0 || ids[0] != u.Gid {
		ids = append([]string{u.Gid}, ids...)
	}
	for _, s := range ids {
		g, err := strconv.ParseUint(s, 10, 32)
		if err != nil || a.InGroup(uint32(g)) {
			continue
		}
		a.GIDs = append(a.GIDs, uint32(g))
	}
	return a, nil
}

// UserName names uid from the user database ("" when it has no name).
func UserName(uid uint32) string {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return ""
	}
	return u.Username
}

// GroupName names gid from the group database ("" when it has no name).
func GroupName(gid uint32) string {
	g, err := user.LookupGroupId(strconv.FormatUint(uint64(gid), 10))
	if err != nil {
		return ""
	}
	return g.Name
}

// LookupGroup finds a group's gid by name.
func LookupGroup(name string) (uint32, error) {
	g, err := user.LookupGroup(name)
	if err != nil {
		return 0, err
	}
	gid, err := strconv.ParseUint(g.Gid, 10, 32)
	if err != nil {
		return 0, errors.New("group " + name + ": gid is not a number")
	}
	return uint32(gid), nil
}
