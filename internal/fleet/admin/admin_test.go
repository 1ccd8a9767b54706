package admin_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/admin"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/admin/admintest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

const token = "adm-t0ken-very-secret"

var fakeNow = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func newFake(t *testing.T, pageSize, n int) *admintest.Server {
	t.Helper()
	f := admintest.New(admintest.Options{Token: token, PageSize: pageSize})
	t.Cleanup(f.Close)
	f.SetNow(fakeNow)
	for i := range n {
		at := fakeNow.Add(-time.Duration(i) * time.Second).Format(time.RFC3339)
		site := "cbs"
		if i%3 == 0 {
			site = "osg"
		}
		f.PutAgent(protocol.AdminAgent{EnvID: fmt.Sprintf("env-%03d", i), Site: site, LastCheckinAt: &at, CheckinIntervalS: 60})
	}
	return f
}

func client(t *testing.T, url, tok string) *admin.Client {
	t.Helper()
	c, err := admin.New(url, secret.New(tok), nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestListAgentsFollowsTheCursor(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pageSize  int
		n         int
		site      string
		wantN     int
		wantPages int
	}{
		{"empty", 10, 0, "", 0, 1},
		{"one page", 10, 7, "", 7, 1},
		{"exact", 10, 30, "", 30, 3},
		{"ragged", 10, 31, "", 31, 4},
		{"site filter", 10, 30, "osg", 10, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, tc.pageSize, tc.n)
			var prog []string
			got, err := client(t, f.URL, token).ListAgents(context.Background(), tc.site, func(p, a int) {
				prog = append(prog, fmt.Sprintf("%d:%d", p, a))
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Agents) != tc.wantN || got.Pages != tc.wantPages || len(prog) != tc.wantPages {
				t.Fatalf("agents %d pages %d progress %v; want %d, %d", len(got.Agents), got.Pages, prog, tc.wantN, tc.wantPages)
			}
			if !got.Now.Equal(fakeNow) {
				t.Errorf("now %v, want tenancy's %v", got.Now, fakeNow)
			}
			for _, r := range f.Requests() {
				if r.Query.Get("site") != tc.site {
					t.Errorf("site %q sent, want %q", r.Query.Get("site"), tc.site)
				}
			}
		})
	}
}

func TestListAgentsFailures(t *testing.T) {
	for _, tc := range []struct {
		name    string
		f       admintest.Failure
		tok     string
		wantIs  error
		wantSub string
	}{
		{"bad token", admintest.Failure{}, "wrong", admin.ErrUnauthorized, "HTTP 401 ADMIN_UNAUTHENTICATED: bearer refused"},
		{"500", admintest.Failure{Status: 500}, token, nil, "list agents (page 1): HTTP 500"},
		{"third page 500", admintest.Failure{Status: 502, After: 2}, token, nil, "list agents (page 3): HTTP 502"},
		{"malformed", admintest.Failure{Malformed: true}, token, nil, "list agents (page 1)"},
		{"malformed later page", admintest.Failure{Malformed: true, After: 1}, token, nil, "page 2"},
		{"slow", admintest.Failure{Delay: time.Minute}, token, context.DeadlineExceeded, "list agents"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, 10, 35)
			f.Fail(admintest.OpList, tc.f)
			ctx := context.Background()
			if tc.f.Delay > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
			}
			_, err := client(t, f.URL, tc.tok).ListAgents(ctx, "", nil)
			if err == nil {
				t.Fatal("no error: a verdict would be printed from half the data")
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("%v is not %v", err, tc.wantIs)
			}
			if !strings.Contains(err.Error(), tc.wantSub) {
				t.Errorf("%q lacks %q", err, tc.wantSub)
			}
			if strings.Contains(err.Error(), token) {
				t.Errorf("error leaks the token: %v", err)
			}
		})
	}
}

func TestListAgentsRefusesBrokenListings(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pages map[string]string // cursor → body
		want  string
	}{
		{"cursor loop", map[string]string{
			"":   `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"a"}],"next":"c1"}`,
			"c1": `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"b"}],"next":"c1"}`,
		}, "cursor repeats"},
		{"duplicate env", map[string]string{
			"":   `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"a"}],"next":"c1"}`,
			"c1": `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"a"}],"next":null}`,
		}, "env a appears twice"},
		{"html error page", map[string]string{"": `<html>bad gateway</html>`}, "not a JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = w.Write([]byte(tc.pages[r.URL.Query().Get("cursor")]))
			}))
			defer srv.Close()
			_, err := client(t, srv.URL, token).ListAgents(context.Background(), "", nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func TestNowIsTheNewestPageClock(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("cursor") == "" {
			_, _ = w.Write([]byte(`{"now":"2026-12-02T10:00:00Z","agents":[],"next":"x"}`))
			return
		}
		_, _ = w.Write([]byte(`{"now":"2026-12-02T10:00:02Z","agents":[],"next":null}`))
	}))
	defer srv.Close()
	got, err := client(t, srv.URL, token).ListAgents(context.Background(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 12, 2, 10, 0, 2, 0, time.UTC); !got.Now.Equal(want) {
		t.Errorf("now %v, want %v", got.Now, want)
	}
}

func TestRevealKit(t *testing.T) {
	f := newFake(t, 10, 3)
	f.AddBackend("env-new", "cbs")
	c := client(t, f.URL, token)
	ctx := context.Background()

	k1, err := c.RevealKit(ctx, "env-new", protocol.KitRequest{Site: "cbs", Transport: "sdk"})
	if err != nil {
		t.Fatal(err)
	}
	if k1.EnvID != "env-new" || k1.PackageVersion != "0.2.0" || k1.TenancyPort != 443 || k1.BootstrapGrant == "" {
		t.Fatalf("kit %+v", k1)
	}
	k2, err := c.RevealKit(ctx, "env-new", protocol.KitRequest{Site: "cbs", Transport: "sdk"})
	if err != nil {
		t.Fatal(err)
	}
	if !f.Superseded(k1.BootstrapGrant) || f.Superseded(k2.BootstrapGrant) {
		t.Errorf("second reveal must supersede the first grant only")
	}
	kits := f.Kits()
	if len(kits) != 2 || kits[1].Request.Transport != "sdk" {
		t.Errorf("kits %+v", kits)
	}

	_, err = c.RevealKit(ctx, "env-nobody", protocol.KitRequest{Site: "cbs"})
	if !errors.Is(err, admin.ErrBackendUnknown) {
		t.Errorf("unknown env: %v, want ErrBackendUnknown", err)
	}
	if _, err := c.RevealKit(ctx, "../etc", protocol.KitRequest{}); err == nil {
		t.Errorf("a path-like env id was sent")
	}
	f.Fail(admintest.OpKit, admintest.Failure{Status: 500})
	if _, err := c.RevealKit(ctx, "env-new", protocol.KitRequest{}); err == nil || !strings.Contains(err.Error(), "HTTP 500") {
		t.Errorf("500: %v", err)
	}
}

func TestNewRefusesBadConfig(t *testing.T) {
	for _, tc := range []struct{ url, tok, want string }{
		{"ftp://x", token, "not an http(s) URL"},
		{"http://", token, "not an http(s) URL"},
		{"http://x", "", "no admin token"},
	} {
		if _, err := admin.New(tc.url, secret.New(tc.tok), nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q): %v, want %q", tc.url, err, tc.want)
		}
	}
}

// Go's client resends Authorization on a redirect to the same host on another port: the admin
// token goes nowhere a redirect points, and the error names the target.
func TestNoCallFollowsARedirect(t *testing.T) {
	var stolen []string
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		stolen = append(stolen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Authorization"))
	}))
	defer target.Close()
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, target.URL+r.URL.Path+"?sso=1", http.StatusTemporaryRedirect)
	}))
	defer origin.Close()
	c := client(t, origin.URL, token)
	ctx := context.Background()
	_, errList := c.ListAgents(ctx, "", nil)
	_, errKit := c.RevealKit(ctx, "env-a", protocol.KitRequest{})
	for name, err := range map[string]error{"list": errList, "reveal": errKit} {
		if err == nil || !strings.Contains(err.Error(), "refusing to send the token to "+target.URL+"/v1/admin/") || strings.Contains(err.Error(), "sso=") {
			t.Errorf("%s: err = %v, want the redirect target named", name, err)
		}
	}
	if len(stolen) != 0 {
		t.Fatalf("the redirect target got %q", stolen)
	}
}

// The listing asks tenancy for its largest page (limit=MaxAgentsPageLimit) on every page: 10,000
// envs are two round trips, not twenty; a tenancy that answers fewer is followed as before.
func TestListAgentsAsksTheLargestPage(t *testing.T) {
	const n = 2*admintest.DefaultPage + 1
	for _, tc := range []struct {
		name      string
		serves    int // the most tenancy puts in a page
		wantPages int
	}{
		{"tenancy serves the limit", protocol.MaxAgentsPageLimit, 1},
		{"tenancy caps lower", admintest.DefaultPage, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t, tc.serves, n)
			got, err := client(t, f.URL, token).ListAgents(context.Background(), "", nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(got.Agents) != n || got.Pages != tc.wantPages {
				t.Errorf("%d agents in %d pages, want %d in %d", len(got.Agents), got.Pages, n, tc.wantPages)
			}
			for _, r := range f.Requests() {
				if r.Path == "/v1/admin/agents" && r.Query.Get("limit") != strconv.Itoa(protocol.MaxAgentsPageLimit) {
					t.Errorf("page asked with limit %q, want %d", r.Query.Get("limit"), protocol.MaxAgentsPageLimit)
				}
			}
		})
	}
}

// A page is decoded as it arrives; an answer cut short, or one beyond 64 MiB, is named as the
// answer's fault and fails the listing (no verdict from part of a page).
func TestListAgentsStreamedAnswerFails(t *testing.T) {
	head := `{"now":"2026-12-02T10:00:00Z","agents":[{"env_id":"env-a"},`
	for _, tc := range []struct {
		name  string
		serve func(w http.ResponseWriter)
		want  string
	}{
		{"cut short", func(w http.ResponseWriter) {
			w.Header().Set("Content-Length", "100000")
			_, _ = w.Write([]byte(head))
		}, "tenancy: list agents (page 1): read the answer: unexpected EOF"},
		{"too large", func(w http.ResponseWriter) {
			_, _ = w.Write([]byte(head + `{"env_id":"env-b","last_detail":"`))
			chunk := []byte(strings.Repeat("x", 1<<20))
			for range 65 {
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		}, "tenancy: list agents (page 1): answer larger than 67108864 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { tc.serve(w) }))
			t.Cleanup(srv.Close)
			_, err := client(t, srv.URL, token).ListAgents(context.Background(), "", nil)
			if err == nil || err.Error() != tc.want {
				t.Fatalf("ListAgents = %v, want %q", err, tc.want)
			}
		})
	}
}
