//go:build integration

package zitidev_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/test/itest"
)

// TestQuickstart: the controller and router come up, host a service, enrol an identity, and come
// back with it after a restart; the admin password appears in no output.
func TestQuickstart(t *testing.T) {
	c := itest.StartZiti(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) }))
	defer web.Close()
	if err := c.HostService(ctx, "zitidev-test", strings.TrimPrefix(web.URL, "http://"), "zitidev-client"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	id, err := c.Identity(ctx, "zitidev-client-1", []string{"zitidev-client"}, dir)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		ZtAPI string `json:"ztAPI"`
	}
	b, err := os.ReadFile(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &doc); err != nil || !strings.Contains(doc.ZtAPI, c.Addr) {
		t.Fatalf("the enrolled identity names controller %q (err %v), want %s", doc.ZtAPI, err, c.Addr)
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	out, err := c.CLI(ctx, "edge", "list", "identities", `name="zitidev-client-1"`, "-j")
	if err != nil || !strings.Contains(out, "zitidev-client-1") {
		t.Fatalf("after a restart the identity is gone: %v\n%s", err, out)
	}
	if strings.Contains(c.LogTail(), c.Password.Reveal()) {
		t.Error("the quickstart's log tail shows the admin password")
	}
}
