package cli

import (
	"bytes"
	"errors"
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
