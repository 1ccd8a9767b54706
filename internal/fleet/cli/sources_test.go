package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/report"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/ziti/zititest"
)

// certAuth switches h to certificate auth with an identity file edited by edit, and no
// ziti.url. It returns the file's path.
func (h *harness) certAuth(edit func(doc map[string]any)) string {
	h.t.Helper()
	raw, err := h.f.z.ClientIdentityFile("ops-admin")
	if err != nil {
		h.t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		h.t.Fatal(err)
	}
	edit(doc)
	raw, _ = json.Marshal(doc)
	p := filepath.Join(h.work, "ops.json")
	if err := os.WriteFile(p, raw, 0o600); err != nil {
		h.t.Fatal(err)
	}
	for _, k := range []string{"FLEETCTL_ZITI_URL", "FLEETCTL_ZITI_USERNAME", "FLEETCTL_ZITI_PASSWORD", "FLEETCTL_ZITI_CA_FILE"} {
		delete(h.env, k)
	}
	h.env["FLEETCTL_ZITI_IDENTITY"] = p
	return p
}

func (h *harness) statusDoc(args ...string) (*report.Document, int) {
	h.t.Helper()
	code := h.run(context.Background(), append([]string{"status", "-o", "json"}, args...)...)
	var doc report.Document
	if code > 1 || json.Unmarshal(h.stdout.Bytes(), &doc) != nil {
		h.t.Fatalf("exit %d\n%s\n%s", code, h.stdout.String(), h.stderr.String())
	}
	return &doc, code
}

func verdictOf(doc *report.Document, env string) string {
	for _, e := range doc.Envs {
		if e.EnvID == env {
			return e.Verdict
		}
	}
	return ""
}

// A create and a delete on either side of a page boundary hide a live identity from the listing
// without a trace; fleetctl looks every env the listing lacks up by name before judging it, so
// a working box is never told to re-run onboard (review fd-2).
func TestAnIdentityTheListingMissedIsConfirmed(t *testing.T) {
	h := newHarness(t)
	h.f.z.SetMaxLimit(2) // pages of two: dev-01 dev-02 | dev-03 dev-08 | …
	done := false
	h.f.z.OnList(func(offset int64) {
		if offset == 2 && !done {
			done = true
			h.f.z.RemoveIdentity("monky-host.env-dev-01")                    // ahead of the offset: dev-03 moves to the first page
			h.f.z.AddIdentity(zititest.Identity{Name: "monky-host.zzz-new"}) // behind it: totalCount stays
		}
	})
	doc, _ := h.statusDoc("--ziti-concurrency", "1")
	if v := verdictOf(doc, "env-dev-03"); v != "OK" {
		t.Errorf("env-dev-03 is %s, want OK (its identity is live)", v)
	}
	// An env that really has no identity is still said to have none: it was looked up.
	if v := verdictOf(doc, "env-stg-03"); v != "NO_IDENTITY" {
		t.Errorf("env-stg-03 is %s, want NO_IDENTITY", v)
	}
	lookups := map[string]bool{}
	for _, r := range h.f.z.Requests() {
		if f := r.Query.Get("filter"); strings.HasPrefix(f, "name = ") {
			lookups[f] = true
		}
	}
	for _, want := range []string{`name = "monky-host.env-dev-03"`, `name = "monky-host.env-stg-03"`} {
		if !lookups[want] {
			t.Errorf("no lookup %s (got %v)", want, lookups)
		}
	}
}

// With more envs missing than it would look up one by one, fleetctl reads the list again
// instead, and an identity found in either reading counts.
func TestManyMissingIdentitiesReadTheListAgain(t *testing.T) {
	h := newHarness(t)
	addEnvsWithoutIdentity(h, maxConfirm+1)
	doc, _ := h.statusDoc()
	listings, lookups := 0, 0
	for _, r := range h.f.z.Requests() {
		switch f := r.Query.Get("filter"); {
		case strings.HasPrefix(f, "name contains"):
			listings++
		case strings.HasPrefix(f, "name = "):
			lookups++
		}
	}
	if listings != 2 || lookups != 0 {
		t.Errorf("%d listings and %d lookups, want 2 and 0", listings, lookups)
	}
	if v := verdictOf(doc, "env-new-000"); v != "NO_IDENTITY" {
		t.Errorf("env-new-000 is %s", v)
	}
	if v := verdictOf(doc, "env-dev-03"); v != "OK" {
		t.Errorf("env-dev-03 is %s", v)
	}
}

// The second reading of the list goes through the same re-login as the first: a controller that
// drops the session between the two readings does not fail the round.
func TestReadingTheListAgainLogsInAgainWhenTheSessionWasDropped(t *testing.T) {
	h := newHarness(t)
	addEnvsWithoutIdentity(h, maxConfirm+1)
	var once sync.Once
	h.f.z.OnList(func(offset int64) {
		if offset == 0 {
			// The first listing is answered; the next one meets a dropped session. (Expiring
			// the sessions here would also refuse the certificates listing racing beside this
			// one, on a session that may not have answered yet.)
			once.Do(func() { h.f.z.Fail(zititest.OpList, zititest.Failure{Status: 401, Times: 1}) })
		}
	})
	doc, _ := h.statusDoc()
	listings, logins := 0, 0
	for _, r := range h.f.z.Requests() {
		if strings.HasPrefix(r.Query.Get("filter"), "name contains") {
			listings++
		}
		if r.Path == "/edge/management/v1/authenticate" {
			logins++
		}
	}
	if logins != 2 || listings < 3 {
		t.Errorf("%d logins and %d listings, want 2 logins and 3 listings (the refused one read again)", logins, listings)
	}
	if v := verdictOf(doc, "env-dev-03"); v != "OK" {
		t.Errorf("env-dev-03 is %s", v)
	}
}

// Configuration errors end the command before any network, the same way every time, and --watch
// does not repeat them round after round (review fd-3).
func TestZitiConfigErrorsComeBeforeAnyNetwork(t *testing.T) {
	for _, args := range [][]string{{"status"}, {"status", "--watch", "1s"}, {"gate"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			h := newHarness(t)
			h.certAuth(func(doc map[string]any) { delete(doc, "ztAPI") })
			h.env["FLEETCTL_TENANCY_URL"] = "http://127.0.0.1:1" // unreachable: a race would exit 3
			h.onSleep = func(int) error {
				t.Error("a --watch round was slept after a configuration error")
				return context.Canceled
			}
			code := h.run(context.Background(), args...)
			if code != 2 || !strings.Contains(h.stderr.String(), "ziti.url is not set, and the identity file") {
				t.Fatalf("exit %d: %s", code, h.stderr.String())
			}
			if n := len(h.f.z.Requests()) + len(h.f.a.Requests()); n != 0 {
				t.Errorf("%d requests before the configuration error", n)
			}
		})
	}
}

// A password in ziti.url is refused up front, naming the key, and printed nowhere (review fd-6).
func TestAPasswordInTheZitiURLIsRefusedUnprinted(t *testing.T) {
	h := newHarness(t)
	h.env["FLEETCTL_ZITI_URL"] = "https://admin:hunter2@127.0.0.1:1"
	for _, args := range [][]string{{"-v", "status"}, {"-v", "repair-attrs", "--all"}, {"-v", "onboard", "env-dev-02", "--site", "cbs", "--out", h.work + "/kits"}} {
		code := h.run(context.Background(), args...)
		out := h.stdout.String() + h.stderr.String()
		if code != 2 || !strings.Contains(out, `ziti.url: "https://admin:xxxxx@127.0.0.1:1" carries a user or password`) || !strings.Contains(out, "env FLEETCTL_ZITI_URL") {
			t.Errorf("%v: exit %d: %s", args, code, out)
		}
		if strings.Contains(out, "hunter2") {
			t.Errorf("%v: the password was printed: %s", args, out)
		}
	}
	if n := len(h.f.z.Requests()) + len(h.f.a.Requests()); n != 0 {
		t.Errorf("%d requests", n)
	}
}

// The management API is looked for beside the identity file's client API, under its prefix;
// when it is not there, the error says to set ziti.url (review fd-7, fd-8).
func TestTheIdentityFilesControllerPrefixAndItsHint(t *testing.T) {
	h := newHarness(t)
	h.certAuth(func(doc map[string]any) { doc["ztAPI"] = h.f.z.URL + "/gw/edge/client/v1" })
	code := h.run(context.Background(), "status")
	if code != 3 || !strings.Contains(h.stderr.String(), "the management API is not at the identity file's controller address; set ziti.url") {
		t.Fatalf("exit %d: %s", code, h.stderr.String())
	}
	reqs := h.f.z.Requests()
	if len(reqs) != 1 || reqs[0].Path != "/gw/edge/management/v1/authenticate" {
		t.Errorf("requests %+v, want one authenticate under /gw", reqs)
	}
	// The same 404 with ziti.url set explicitly is the operator's URL: no hint about the file.
	h.env["FLEETCTL_ZITI_URL"] = h.f.z.URL + "/gw"
	if code := h.run(context.Background(), "status"); code != 3 || strings.Contains(h.stderr.String(), "identity file's controller") {
		t.Errorf("exit %d: %s", code, h.stderr.String())
	}
}

// addEnvsWithoutIdentity adds n envs tenancy knows (env-new-000…) that have no ziti identity:
// more than maxConfirm make fleetctl read the list again rather than look each one up.
func addEnvsWithoutIdentity(h *harness, n int) {
	for i := range n {
		a := h.f.a.Agents()[0]
		a.EnvID, a.Identity = fmt.Sprintf("env-new-%03d", i), ""
		h.f.a.PutAgent(a)
	}
}

// Reading the whole fleet collects garbage a quarter as often, and puts the pacing back after;
// an operator's GOGC wins.
func TestReaderGC(t *testing.T) {
	const base = 150 // the pacing before the command: neither the default nor readerGC's
	for _, tc := range []struct {
		gogc string
		want int
	}{{"", 300}, {"50", base}} {
		g := &globalOptions{deps: Deps{Getenv: func(k string) string {
			if k == "GOGC" {
				return tc.gogc
			}
			return ""
		}}}
		prev := debug.SetGCPercent(base)
		restore := g.readerGC()
		if got := debug.SetGCPercent(tc.want); got != tc.want {
			t.Errorf("GOGC=%q: pacing %d while reading, want %d", tc.gogc, got, tc.want)
		}
		restore()
		if got := debug.SetGCPercent(prev); got != base {
			t.Errorf("GOGC=%q: pacing %d after, want the previous %d", tc.gogc, got, base)
		}
	}
}
