package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/journal"
)

// fakeProcess is a process whose re-execution is recorded instead of done; become always fails
// (a real one would not return), which is the refusal path's input too.
type fakeProcess struct {
	euid     int
	owner    uint32
	ownerErr error
	accounts map[uint32]account
	became   []account
	argv     []string
	env      []string
	// state_dir's entries, and what making or giving it answers; made and given record the calls
	entries          []string
	makeErr, giveErr error
	made, given      []string
}

func (f *fakeProcess) process() process {
	return process{
		euid:  func() int { return f.euid },
		owner: func(string) (uint32, error) { return f.owner, f.ownerErr },
		lookup: func(uid uint32) (account, error) {
			if a, ok := f.accounts[uid]; ok {
				return a, nil
			}
			return account{}, errors.New("unknown userid")
		},
		lookupName: func(name string) (account, error) {
			for _, a := range f.accounts {
				if a.name == name {
					return a, nil
				}
			}
			return account{}, errors.New("unknown user " + name)
		},
		giveEmpty: func(p string, uid, gid uint32) ([]string, error) {
			if len(f.entries) > 0 || f.giveErr != nil {
				return f.entries, f.giveErr
			}
			f.given = append(f.given, fmt.Sprintf("%s %d:%d", p, uid, gid))
			return nil, nil
		},
		makeFor: func(p string, uid, gid uint32) error {
			if f.makeErr != nil {
				return f.makeErr
			}
			f.made = append(f.made, fmt.Sprintf("%s %d:%d", p, uid, gid))
			return nil
		},
		become: func(a account, argv, env []string) error {
			f.became = append(f.became, a)
			f.argv, f.env = argv, env
			return errors.New("setuid: operation not permitted")
		},
		environ: func() []string {
			return []string{"HOME=/root", "PATH=/usr/bin", "USER=root", "MONKY_DEPLOYD_CONFIG=/etc/x.yaml", "LC_ALL=C.UTF-8",
				"DOCKER_HOST=tcp://elsewhere:2375", "BAO_TOKEN=s.root-token", "AWS_SECRET_ACCESS_KEY=root-secret", "SUDO_USER=alice",
				"MONKY_DEPLOYD_TICK_ID=000000000000"} // an inherited id is replaced by the tick's own
		},
	}
}

func TestAsStateOwner(t *testing.T) {
	agentAcct := account{name: "monky-deployd", uid: 998, gid: 997, groups: []uint32{997, 996, 995}, home: "/var/lib/monky-deployd"}
	cfg := &config.Config{Path: "/etc/monky-deployd/config.yaml", StateDir: "/var/lib/monky-deployd"}
	args := []string{"--config", cfg.Path, "tick", "--prune"}
	for _, tc := range []struct {
		name     string
		proc     fakeProcess
		wantCode int // 0: nil error
		wantText string
		becomes  bool
	}{
		{"not root", fakeProcess{euid: 998, owner: 998}, 0, "", false},
		{"root owns state_dir", fakeProcess{euid: 0, owner: 0}, 0, "", false},
		{"no state_dir yet", fakeProcess{euid: 0, ownerErr: fs.ErrNotExist}, 0, "", false},
		{"agent owns state_dir", fakeProcess{euid: 0, owner: 998, accounts: map[uint32]account{998: agentAcct}}, 78,
			"could not re-run as monky-deployd, the owner of state_dir /var/lib/monky-deployd: setuid: operation not permitted; nothing was done. Run the tick as that user: sudo -u monky-deployd monky-deployd --config /etc/monky-deployd/config.yaml tick", true},
		{"owner without an account", fakeProcess{euid: 0, owner: 4242}, 78,
			"state_dir /var/lib/monky-deployd belongs to uid 4242, which has no account here (unknown userid); a tick as root would leave files that uid cannot replace; nothing was done. Run the tick as that user: sudo -u '#4242' monky-deployd --config /etc/monky-deployd/config.yaml tick", false},
		{"owner unreadable", fakeProcess{euid: 0, ownerErr: fs.ErrPermission}, 78, "cannot tell who owns state_dir", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			err := asStateOwner(tc.proc.process(), cfg, slog.New(journal.New(&logs, slog.LevelInfo)), args, "tick", "3f9a0c1d2e4b")
			if tc.wantCode == 0 {
				if err != nil {
					t.Fatalf("asStateOwner = %v, want nil", err)
				}
			} else {
				var ee *exitError
				if !errors.As(err, &ee) || ee.code != tc.wantCode || !strings.Contains(err.Error(), tc.wantText) {
					t.Fatalf("asStateOwner = %v, want exit %d with %q", err, tc.wantCode, tc.wantText)
				}
			}
			p := tc.proc
			if got := len(p.became) > 0; got != tc.becomes {
				t.Fatalf("became %v, want a re-run %v", p.became, tc.becomes)
			}
			if !tc.becomes {
				return
			}
			if a := p.became[0]; a.uid != 998 || a.gid != 997 || !slices.Equal(a.groups, []uint32{997, 996, 995}) {
				t.Errorf("became %+v, want the agent's uid, gid and every group", a)
			}
			if !slices.Equal(p.argv, append([]string{"monky-deployd"}, args...)) {
				t.Errorf("argv %q, want the same command line", p.argv)
			}
			want := []string{"PATH=/usr/bin", "MONKY_DEPLOYD_CONFIG=/etc/x.yaml", "LC_ALL=C.UTF-8", "HOME=/var/lib/monky-deployd", "USER=monky-deployd", "LOGNAME=monky-deployd", "MONKY_DEPLOYD_TICK_ID=3f9a0c1d2e4b"}
			if !slices.Equal(p.env, want) {
				t.Errorf("env %q\nwant %q: only a path, the locale and the config's location pass, with the account's HOME, USER and LOGNAME, and the tick's id (the re-run is the same tick)", p.env, want)
			}
			if !strings.Contains(logs.String(), "re-running as the owner of state_dir") {
				t.Errorf("journal %q does not say the tick re-ran", logs.String())
			}
		})
	}
}

// A root tick finding no state_dir, or root's own, never creates files as root: the state_dir is
// made (or, empty, given) for agent_user and the tick re-runs as it; what it cannot do, it
// refuses with exit 78 and the command that works.
func TestRootTickWithoutTheAgentsStateDir(t *testing.T) {
	agentAcct := account{name: "monky-deployd", uid: 998, gid: 997, groups: []uint32{997, 996}, home: "/var/lib/monky-deployd"}
	withAgent := map[uint32]account{998: agentAcct}
	parse := func(extra string) *config.Config {
		cfg, err := config.Parse([]byte("env_id: env-qa-02\n"+extra), "/etc/monky-deployd/config.yaml")
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	const dir = "/var/lib/monky-deployd"
	for _, tc := range []struct {
		name     string
		extra    string
		proc     fakeProcess
		wantCode int
		wantText string
		made     []string
		given    []string
		becomes  bool
	}{
		{"no state_dir: made for the agent, re-run as it", "", fakeProcess{euid: 0, ownerErr: fs.ErrNotExist, accounts: withAgent}, 78,
			"could not re-run as monky-deployd", []string{dir + " 998:997"}, nil, true},
		{"root's empty state_dir: given to the agent", "", fakeProcess{euid: 0, owner: 0, accounts: withAgent}, 78,
			"could not re-run as monky-deployd", nil, []string{dir + " 998:997"}, true},
		{"root's state_dir holding files: refused, nothing changed", "", fakeProcess{euid: 0, owner: 0, accounts: withAgent, entries: []string{"state.json", "bao.token"}}, 78,
			"state_dir /var/lib/monky-deployd belongs to root and holds files monky-deployd (agent_user) cannot use, left by a tick run as root; give them back first: sudo chown -hR monky-deployd:monky-deployd /var/lib/monky-deployd; nothing was done. Run the tick as that user: sudo -u monky-deployd monky-deployd --config /etc/monky-deployd/config.yaml tick",
			nil, nil, false},
		{"no parent: refused with the install line", "", fakeProcess{euid: 0, ownerErr: fs.ErrNotExist, accounts: withAgent, makeErr: fs.ErrNotExist}, 78,
			"make it: sudo install -d -o monky-deployd -g monky-deployd -m 0700 /var/lib/monky-deployd", nil, nil, false},
		{"a state_dir that cannot be given", "", fakeProcess{euid: 0, owner: 0, accounts: withAgent, giveErr: fs.ErrPermission}, 78,
			"could not be given to monky-deployd", nil, nil, false},
		{"agent_user named but absent", "agent_user: deploy\n", fakeProcess{euid: 0, ownerErr: fs.ErrNotExist, accounts: withAgent}, 78,
			"agent_user deploy has no account here (unknown user deploy); a tick as root would leave files the agent cannot use; nothing was done. Run the tick as that user: sudo -u deploy", nil, nil, false},
		{"agent_user root: root is the agent", "agent_user: root\n", fakeProcess{euid: 0, ownerErr: fs.ErrNotExist, accounts: map[uint32]account{0: {name: "root"}}}, 0,
			"", nil, nil, false},
		{"no agent account and no agent_user: a box without the package", "", fakeProcess{euid: 0, ownerErr: fs.ErrNotExist}, 0,
			"", nil, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs bytes.Buffer
			p := tc.proc
			err := asStateOwner(p.process(), parse(tc.extra), slog.New(journal.New(&logs, slog.LevelInfo)), []string{"tick"}, "tick", "")
			if tc.wantCode == 0 {
				if err != nil {
					t.Fatalf("asStateOwner = %v, want nil", err)
				}
			} else {
				var ee *exitError
				if !errors.As(err, &ee) || ee.code != tc.wantCode || !strings.Contains(err.Error(), tc.wantText) {
					t.Fatalf("asStateOwner = %v\nwant exit %d with %q", err, tc.wantCode, tc.wantText)
				}
			}
			if !slices.Equal(p.made, tc.made) || !slices.Equal(p.given, tc.given) {
				t.Errorf("made %q, given %q; want %q, %q", p.made, p.given, tc.made, tc.given)
			}
			if got := len(p.became) > 0; got != tc.becomes {
				t.Fatalf("became %v, want a re-run %v", p.became, tc.becomes)
			}
			if tc.becomes && (p.became[0].uid != 998 || !strings.Contains(logs.String(), "re-running as it, with its groups")) {
				t.Errorf("became %+v; journal %q", p.became[0], logs.String())
			}
		})
	}
}
