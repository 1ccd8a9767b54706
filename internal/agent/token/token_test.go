package token

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/config"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

func TestAddr(t *testing.T) {
	for _, tc := range []struct {
		name string
		st   state.State
		want string
	}{
		{"no token", state.State{}, "https://tick"},
		{"recorded before addr was", state.State{Token: &state.TokenMeta{Source: "lease"}}, "https://tick"},
		{"minted elsewhere", state.State{Token: &state.TokenMeta{Addr: "https://lease"}}, "https://lease"},
	} {
		if got := Addr(&tc.st, "https://tick"); got != tc.want {
			t.Errorf("%s: Addr = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestRecover covers each half-done swap a killed tick can leave.
func TestRecover(t *testing.T) {
	for _, tc := range []struct {
		name      string
		staged    bool
		previous  bool
		want      Recovery
		wantToken string
	}{
		{"nothing", false, false, NoSwap, "old"},
		{"staged, not recorded", true, false, Undone, "old"},
		{"staged and recorded", true, true, Finished, "new"},
		{"renamed, not finished", false, true, Unrevoked, "old"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := In(&config.Config{StateDir: t.TempDir()})
			if err := Write(f.Token, secret.New("old")); err != nil {
				t.Fatal(err)
			}
			if tc.staged {
				if err := f.Stage(secret.New("new")); err != nil {
					t.Fatal(err)
				}
			}
			st := &state.State{}
			if tc.previous {
				st.PreviousToken = &state.TokenMeta{Source: state.SourceBootstrap}
			}
			got, err := f.Recover(st)
			if err != nil || got != tc.want {
				t.Fatalf("Recover = %v, %v; want %v", got, err, tc.want)
			}
			if st.PreviousToken != nil {
				t.Error("previous_token still set")
			}
			if _, err := os.Lstat(f.Staged); err == nil {
				t.Error("bao.token.new still there")
			}
			if v, _ := Read(f.Token); v.Reveal() != tc.wantToken {
				t.Errorf("bao.token = %q, want %q", v.Reveal(), tc.wantToken)
			}
		})
	}
}

func TestKeptGrant(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := In(&config.Config{StateDir: t.TempDir()})
	st := &state.State{Token: &state.TokenMeta{Source: state.SourceBootstrap, Accessor: "acc1"}}
	g := Grant{JWT: secret.New("jwt.grant.sig"), Addr: "https://lease", Mount: "jwt", Role: "r", ExpiresAt: now.Add(time.Hour), Bearer: "acc1"}
	if err := f.Keep(st, g); err != nil {
		t.Fatal(err)
	}
	if filepath.Base(f.Grant) != "lease.jwt" {
		t.Errorf("grant file %s, want lease.jwt", f.Grant)
	}
	if got, ok := f.Kept(st, now); !ok || got.JWT.Reveal() != "jwt.grant.sig" || got.Addr != g.Addr || got.Bearer != "acc1" {
		t.Errorf("Kept = %+v, %v; want the kept grant", got, ok)
	}
	if _, ok := f.Kept(st, now.Add(2*time.Hour)); ok {
		t.Error("an expired grant is still usable")
	}
	st.Token.Accessor = "acc2" // the token that leased it was replaced
	if _, ok := f.Kept(st, now); ok {
		t.Error("a grant of a dropped token generation is still usable")
	}
}
