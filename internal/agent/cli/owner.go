package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"strings"
	"syscall"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/tick"
)

// account is a user a root tick becomes: the owner of state_dir.
type account struct {
	name   string
	uid    uint32
	gid    uint32   // primary group
	groups []uint32 // every group, the primary one included (docker and ziti among them)
	home   string
}

// process is what the ownership guard asks of the running process; tests replace it.
type process struct {
	euid func() int
	// owner returns the uid owning path, symlinks followed (files land where it points).
	owner func(path string) (uint32, error)
	// lookup finds uid's account with its groups (an error when the uid has no account).
	lookup func(uid uint32) (account, error)
	// lookupName finds the account called name, as lookup does.
	lookupName func(name string) (account, error)
	// giveEmpty gives the directory at path (symlinks followed) to uid and gid when it is
	// root's and empty; else it returns its entries and gives nothing.
	giveEmpty func(path string, uid, gid uint32) (entries []string, err error)
	// makeFor makes directory path (its parent existing), 0700, for uid and gid.
	makeFor func(path string, uid, gid uint32) error
	// become drops to a and executes this binary with argv and env; it returns only on failure.
	become  func(a account, argv, env []string) error
	environ func() []string
	// loginUser and userName name who runs a command ("" when unknown): hold records them.
	loginUser func() string
	userName  func() string
}

var realProcess = process{
	euid:       os.Geteuid,
	owner:      statOwner,
	lookup:     lookupAccount,
	lookupName: lookupAccountName,
	giveEmpty:  giveEmptyDir,
	makeFor:    makeDirFor,
	become:     becomeAndExec,
	environ:    os.Environ,
	loginUser:  loginUser,
	userName:   userName,
}

// asStateOwner re-executes a root tick (or hold, unhold) as state_dir's owner, with its groups
// (root's 0600 files once stopped every later tick); when it cannot, an exit-78 error with the
// command to run, cmd in it. A tick's re-run carries tickID (TickIDEnv): one tick, one id. A
// state_dir that is missing, or root's, is the agent's (asAgentUser): root creates nothing in it.
func asStateOwner(p process, cfg *config.Config, log *slog.Logger, args []string, cmd, tickID string) error {
	if p.euid() != 0 {
		return nil
	}
	uid, err := p.owner(cfg.StateDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return asAgentUser(p, cfg, log, args, cmd, tickID, false)
	case err != nil:
		return ownerError(cfg, fmt.Sprintf("cannot tell who owns state_dir %s: %v", cfg.StateDir, err), "the agent's user", cmd)
	case uid == 0:
		return asAgentUser(p, cfg, log, args, cmd, tickID, true)
	}
	a, err := p.lookup(uid)
	if err != nil {
		return ownerError(cfg, fmt.Sprintf("state_dir %s belongs to uid %d, which has no account here (%v); a tick as root would leave files that uid cannot replace", cfg.StateDir, uid, err), "'#"+strconv.FormatUint(uint64(uid), 10)+"'", cmd)
	}
	return reRunAs(p, cfg, log, args, cmd, tickID, a, "running as root: re-running as the owner of state_dir, with its groups")
}

// asAgentUser handles a root tick finding no state_dir, or root's own: a tick as root there would
// create the lock, bao.token, docker/ and the releases as root, and the agent's next tick could
// read none of them. The agent's account is agent_user (the unit's User=): a missing state_dir
// is made, 0700, and an empty one of root's given, to that account alone, and the tick re-runs
// as it. Where agent_user is root, or is left at its default and that account does not exist
// (a box without the package), root is the agent's user and the tick goes on.
func asAgentUser(p process, cfg *config.Config, log *slog.Logger, args []string, cmd, tickID string, exists bool) error {
	a, err := p.lookupName(cfg.AgentUser)
	switch {
	case err != nil && !cfg.AgentUserSet():
		return nil
	case err != nil:
		return ownerError(cfg, fmt.Sprintf("agent_user %s has no account here (%v); a tick as root would leave files the agent cannot use", cfg.AgentUser, err), cfg.AgentUser, cmd)
	case a.uid == 0:
		return nil
	}
	made := "made state_dir, 0700, for the agent's user"
	if exists {
		names, err := p.giveEmpty(cfg.StateDir, a.uid, a.gid)
		switch {
		case err != nil:
			return ownerError(cfg, fmt.Sprintf("state_dir %s could not be given to %s: %v", cfg.StateDir, a.name, err), a.name, cmd)
		case len(names) > 0:
			return ownerError(cfg, fmt.Sprintf("state_dir %s belongs to root and holds files %s (agent_user) cannot use, left by a tick run as root; give them back first: sudo chown -hR %s:%s %s",
				cfg.StateDir, a.name, a.name, a.name, cfg.StateDir), a.name, cmd)
		}
		made = "gave the empty state_dir to the agent's user"
	} else if err := p.makeFor(cfg.StateDir, a.uid, a.gid); err != nil {
		return ownerError(cfg, fmt.Sprintf("state_dir %s could not be made for %s (%v); make it: sudo install -d -o %s -g %s -m 0700 %s",
			cfg.StateDir, a.name, err, a.name, a.name, cfg.StateDir), a.name, cmd)
	}
	log.Info("running as root: "+made+"; re-running as it, with its groups", "state_dir", cfg.StateDir, "agent_user", a.name)
	return reRunAs(p, cfg, log, args, cmd, tickID, a, "running as root: re-running as the agent's user, with its groups")
}

// reRunAs executes this binary again as a, with a's groups; it returns only an exit-78 error.
func reRunAs(p process, cfg *config.Config, log *slog.Logger, args []string, cmd, tickID string, a account, msg string) error {
	names := make([]string, len(a.groups))
	for i, g := range a.groups {
		names[i] = groupName(g)
	}
	log.Info(msg, "user", a.name, "uid", a.uid, "groups", strings.Join(names, ","), "state_dir", cfg.StateDir)
	env := withAccountEnv(p.environ(), a)
	if tickID != "" {
		env = append(env, TickIDEnv+"="+tickID) // the re-run is the same tick
	}
	err := p.become(a, append([]string{"monky-deployd"}, args...), env)
	return ownerError(cfg, fmt.Sprintf("could not re-run as %s, the owner of state_dir %s: %v", a.name, cfg.StateDir, err), a.name, cmd)
}

// ownerError is the exit-78 refusal with the command that works.
func ownerError(cfg *config.Config, why, sudoUser, cmd string) error {
	name, _, _ := strings.Cut(cmd, " ")
	return &exitError{code: tick.ExitConfig, err: fmt.Errorf("%s; nothing was done. Run the %s as that user: sudo -u %s monky-deployd --config %s %s", why, name, sudoUser, cfg.Path, cmd)}
}

// keptEnv are the variables the re-run keeps (the unit's path and locale, the config location);
// anything else would make the tick differ from the timer's or leak root's secrets.
func keptEnv(k string) bool {
	switch k {
	case "PATH", "LANG", "LANGUAGE", "TZ", "MONKY_DEPLOYD_CONFIG":
		return true
	}
	return strings.HasPrefix(k, "LC_")
}

// withAccountEnv is keptEnv's part of env plus a's HOME, USER, LOGNAME (sudo leaves root's).
func withAccountEnv(env []string, a account) []string {
	out := make([]string, 0, 8)
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); keptEnv(k) {
			out = append(out, kv)
		}
	}
	home := a.home
	if home == "" {
		home = "/"
	}
	return append(out, "HOME="+home, "USER="+a.name, "LOGNAME="+a.name)
}

// statOwner is the owner of directory path, symlinks followed (files land where it points).
func statOwner(path string) (uint32, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("%s: no owner in its stat", path)
	}
	return st.Uid, nil
}

// lookupAccountName is lookupAccount for an account name.
func lookupAccountName(name string) (account, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return account{}, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return account{}, fmt.Errorf("user %s: uid %q is not a number", name, u.Uid)
	}
	return lookupAccount(uint32(uid))
}

// giveEmptyDir judges and gives one open directory, so the directory found root's and empty is
// the one given, whatever is renamed or linked in its place meanwhile.
func giveEmptyDir(path string, uid, gid uint32) ([]string, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if err := rootsDir(f); err != nil {
		return nil, err
	}
	names, err := f.Readdirnames(-1)
	if err != nil || len(names) > 0 {
		return names, err
	}
	return nil, f.Chown(int(uid), int(gid))
}

// makeDirFor makes path 0700 (its parent must exist: root makes no more) and gives it, by its
// open descriptor, never following a link put in its place; undone when it cannot be given.
func makeDirFor(path string, uid, gid uint32) error {
	if err := os.Mkdir(path, 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW, 0)
	if err == nil {
		err = rootsDir(f)
		if err == nil {
			err = errors.Join(f.Chmod(0o700), f.Chown(int(uid), int(gid)))
		}
		f.Close()
	}
	if err != nil {
		_ = os.Remove(path) // root's and empty: nobody could use it
	}
	return err
}

// rootsDir checks that f is a directory root owns.
func rootsDir(f *os.File) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Uid != 0 || !fi.IsDir() {
		return fmt.Errorf("%s is no longer a directory of root's", f.Name())
	}
	return nil
}

// lookupAccount reads uid's name, home, primary group and groups, as initgroups(3) would.
func lookupAccount(uid uint32) (account, error) {
	u, err := user.LookupId(strconv.FormatUint(uint64(uid), 10))
	if err != nil {
		return account{}, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return account{}, fmt.Errorf("user %s: gid %q is not a number", u.Username, u.Gid)
	}
	a := account{name: u.Username, uid: uid, gid: uint32(gid), groups: []uint32{uint32(gid)}, home: u.HomeDir}
	ids, err := u.GroupIds()
	if err != nil {
		return account{}, fmt.Errorf("user %s: groups: %w", u.Username, err)
	}
	for _, s := range ids {
		g, err := strconv.ParseUint(s, 10, 32)
		if err == nil && !containsGID(a.groups, uint32(g)) {
			a.groups = append(a.groups, uint32(g))
		}
	}
	return a, nil
}

func containsGID(list []uint32, g uint32) bool {
	for _, x := range list {
		if x == g {
			return true
		}
	}
	return false
}

func groupName(gid uint32) string {
	s := strconv.FormatUint(uint64(gid), 10)
	if g, err := user.LookupGroupId(s); err == nil {
		return g.Name
	}
	return s
}

// becomeAndExec sets groups, gid, then uid and executes /proc/self/exe; like `sudo -u`, one
// process keeps the tick's terminal, signals, exit code and output whole.
func becomeAndExec(a account, argv, env []string) error {
	groups := make([]int, len(a.groups))
	for i, g := range a.groups {
		groups[i] = int(g)
	}
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setgid(int(a.gid)); err != nil {
		return fmt.Errorf("setgid %d: %w", a.gid, err)
	}
	if err := syscall.Setuid(int(a.uid)); err != nil {
		return fmt.Errorf("setuid %d: %w", a.uid, err)
	}
	if err := syscall.Exec("/proc/self/exe", argv, env); err != nil {
		return fmt.Errorf("exec /proc/self/exe: %w", err)
	}
	return nil
}

// foreignFiles lists what under state_dir the running account does not own; root owns everything.
func foreignFiles(p process, cfg *config.Config) (tick.Foreign, error) {
	euid := p.euid()
	if euid == 0 {
		return tick.Foreign{}, nil
	}
	files, truncated, err := state.ForeignFiles(cfg.StateDir, uint32(euid))
	if err != nil {
		return tick.Foreign{}, err
	}
	name := strconv.Itoa(euid)
	if u, err := user.LookupId(name); err == nil {
		name = u.Username
	}
	return tick.Foreign{Files: files, Truncated: truncated, User: name}, nil
}
