package zititest

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

type client struct {
	t    *testing.T
	s    *Server
	hc   *http.Client
	sess string
}

func newClient(t *testing.T, s *Server) *client {
	return &client{t: t, s: s, hc: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.CertPool()}}}}
}

func (c *client) do(method, path string, body any) (int, map[string]any) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.s.URL+"/edge/management/v1"+path, rd)
	req.Header.Set("Content-Type", "application/json")
	if c.sess != "" {
		req.Header.Set("zt-session", c.sess)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func (c *client) login() {
	c.t.Helper()
	code, out := c.do("POST", "/authenticate?method=password", map[string]string{"username": "admin", "password": "admin-pw"})
	if code != 200 {
		c.t.Fatalf("login: %d %v", code, out)
	}
	c.sess = out["data"].(map[string]any)["token"].(string)
}

func newServer(t *testing.T, n int) *Server {
	t.Helper()
	s, err := New(Options{Users: map[string]string{"admin": "admin-pw"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	for i := range n {
		s.AddIdentity(Identity{Name: fmt.Sprintf("monky-host.env-%03d", i)})
	}
	s.AddIdentity(Identity{Name: "router-1"})
	return s
}

func TestPagingFollowsTheController(t *testing.T) {
	s := newServer(t, 620)
	c := newClient(t, s)
	c.login()
	for _, tc := range []struct {
		query     string
		wantLen   int
		wantLimit float64
		wantTotal float64
	}{
		{"", 10, 10, 621},                        // default page: 10
		{"?limit=1000", 500, 500, 621},           // capped at 500
		{"?limit=500&offset=500", 121, 500, 621}, // last page
		{"?filter=" + url.QueryEscape(`name contains "monky-host."`), 10, 10, 620},
		{"?filter=" + url.QueryEscape(`name = "router-1"`) + "&limit=5", 1, 5, 1},
		{"?filter=" + url.QueryEscape(`name startswith "monky-host.env-00" and name endswith "7"`), 1, 10, 1},
	} {
		code, out := c.do("GET", "/identities"+tc.query, nil)
		if code != 200 {
			t.Fatalf("%s: %d %v", tc.query, code, out)
		}
		p := out["meta"].(map[string]any)["pagination"].(map[string]any)
		if n := len(out["data"].([]any)); n != tc.wantLen || p["limit"] != tc.wantLimit || p["totalCount"] != tc.wantTotal {
			t.Errorf("%s: %d items, pagination %v", tc.query, n, p)
		}
	}
}

// The identity set can change between the pages of one client's listing, and the fake's page cap
// can be lowered so that a small fleet spans several pages.
func TestChangesMidListing(t *testing.T) {
	s := newServer(t, 12)
	c := newClient(t, s)
	c.login()
	s.SetMaxLimit(5)
	var offsets []int64
	s.OnList(func(offset int64) {
		offsets = append(offsets, offset)
		if offset == 5 {
			s.AddIdentity(Identity{Name: "monky-host.aaa-new"})
			if !s.RemoveIdentity("monky-host.env-011") {
				t.Error("RemoveIdentity found nothing")
			}
		}
	})
	q := "?filter=" + url.QueryEscape(`name contains "monky-host."`) + "&limit=500"
	names := func(out map[string]any) (got []string) {
		for _, d := range out["data"].([]any) {
			got = append(got, d.(map[string]any)["name"].(string))
		}
		return got
	}
	_, first := c.do("GET", "/identities"+q, nil)
	_, second := c.do("GET", "/identities"+q+"&offset=5", nil)
	if got := fmt.Sprint(first["meta"].(map[string]any)["pagination"].(map[string]any)["limit"], names(first)); got !=
		"5 [monky-host.env-000 monky-host.env-001 monky-host.env-002 monky-host.env-003 monky-host.env-004]" {
		t.Errorf("first page: %s", got)
	}
	// The new identity sorts first: env-004 moves to the second page, seen twice by offset paging.
	if got := fmt.Sprint(names(second)); got != "[monky-host.env-004 monky-host.env-005 monky-host.env-006 monky-host.env-007 monky-host.env-008]" {
		t.Errorf("second page: %s", got)
	}
	if fmt.Sprint(offsets) != "[0 5]" {
		t.Errorf("hook saw offsets %v", offsets)
	}
	if s.RemoveIdentity("monky-host.env-011") {
		t.Error("removed twice")
	}
	s.OnList(nil)
	s.SetMaxLimit(0)
	if _, out := c.do("GET", "/identities"+q, nil); len(out["data"].([]any)) != 12 {
		t.Errorf("cap not restored: %d", len(out["data"].([]any)))
	}
}

func TestSessionsAndFailures(t *testing.T) {
	s := newServer(t, 3)
	other := newServer(t, 3)
	c := newClient(t, s)
	if code, _ := c.do("GET", "/identities", nil); code != 401 {
		t.Errorf("no session: %d", code)
	}
	c.login()
	// A session of one fake means nothing to another, as with two controllers.
	oc := newClient(t, other)
	oc.sess = c.sess
	if code, _ := oc.do("GET", "/identities", nil); code != 401 {
		t.Errorf("foreign session: %d", code)
	}
	s.Fail(OpList, Failure{Status: 500, After: 1})
	if code, _ := c.do("GET", "/identities", nil); code != 200 {
		t.Errorf("first call after After=1: %d", code)
	}
	code, out := c.do("GET", "/identities", nil)
	if code != 500 || out["error"].(map[string]any)["code"] != "UNHANDLED" {
		t.Errorf("failure: %d %v", code, out)
	}
	s.Fail(OpList, Failure{})
	if code, _ := c.do("GET", "/identities", nil); code != 200 {
		t.Errorf("restored: %d", code)
	}
	s.ExpireSessions()
	if code, _ := c.do("GET", "/identities", nil); code != 401 {
		t.Errorf("expired session: %d", code)
	}
	if code, _ := c.do("POST", "/authenticate?method=password", map[string]string{"username": "admin", "password": "wrong"}); code != 401 {
		t.Errorf("bad password: %d", code)
	}
}

func TestSchemaIsEnforced(t *testing.T) {
	s := newServer(t, 0)
	c := newClient(t, s)
	c.login()
	// The generated binder validates bodies against the real schema: isAdmin and type are
	// required on create.
	if code, _ := c.do("POST", "/identities", map[string]any{"name": "monky-host.x"}); code < 400 || code >= 500 {
		t.Errorf("create without isAdmin/type: %d", code)
	}
	code, _ := c.do("POST", "/identities", map[string]any{"name": "monky-host.x", "isAdmin": false, "type": "Device",
		"roleAttributes": []string{"a"}, "enrollment": map[string]bool{"ott": true}})
	if code != 201 {
		t.Fatalf("create: %d", code)
	}
	id, _ := s.Identity("monky-host.x")
	code, out := c.do("GET", "/identities/"+id.ID, nil)
	if code != 200 || !strings.HasPrefix(out["data"].(map[string]any)["enrollment"].(map[string]any)["ott"].(map[string]any)["jwt"].(string), "eyJ") {
		t.Errorf("detail: %d %v", code, out)
	}
	if code, _ := c.do("GET", "/identities/nope", nil); code != 404 {
		t.Errorf("unknown id: %d", code)
	}
	if code, _ := c.do("GET", "/identities?filter="+url.QueryEscape(`type = "Device"`), nil); code != 400 {
		t.Errorf("an unsupported filter must be refused, not ignored: %d", code)
	}
}

func TestParseFilter(t *testing.T) {
	for _, tc := range []struct {
		in      string
		n       int
		wantErr bool
	}{
		{`name contains "monky-host."`, 1, false},
		{`name = "a \"quoted\" \\ name"`, 1, false},
		{`name contains "x" and id != "y"`, 2, false},
		{`  `, 0, false},
		{`tags contains "x"`, 0, true},
		{`name like "x"`, 0, true},
		{`name contains x`, 0, true},
		{`name contains "x`, 0, true},
		{`name contains "x" or name contains "y"`, 0, true},
	} {
		f, err := parseFilter(tc.in)
		if (err != nil) != tc.wantErr || len(f) != tc.n {
			t.Errorf("parseFilter(%q) = %v, %v", tc.in, f, err)
		}
	}
	f, _ := parseFilter(`name = "a \"quoted\" \\ name"`)
	if f[0].value != `a "quoted" \ name` {
		t.Errorf("unescaped %q", f[0].value)
	}
}

func FuzzParseFilter(f *testing.F) {
	for _, s := range []string{`name contains "monky-host."`, `name = "x" and id = "y"`, `name contains "\"`, `id`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		flt, err := parseFilter(s)
		if err != nil {
			return
		}
		for _, c := range flt {
			if c.field != "name" && c.field != "id" {
				t.Fatalf("accepted field %q", c.field)
			}
		}
		_ = flt.match(&Identity{Name: "monky-host.a", ID: "1"})
	})
}
