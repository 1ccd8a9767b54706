//go:build integration

package itest

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRegistryDemandsCredentials: an anonymous pull is refused, the same pull with the temporary
// logged-in DOCKER_CONFIG succeeds, and the password shows up nowhere it should not.
func TestRegistryDemandsCredentials(t *testing.T) {
	Require(t, PartDocker, PartRegistry, PartGo)
	reg := StartRegistry(t)
	im := BuildImages(t, reg, "v1")[0]
	im.RemoveLocal(t)
	if LocalImageExists(t, im.Ref) {
		t.Fatalf("%s still local after RemoveLocal", im.Ref)
	}

	t.Run("http without credentials is 401", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, path := range []string{"/v2/", "/v2/app/tags/list", "/v2/app/manifests/v1"} {
			code, err := httpStatus(ctx, "http://"+reg.Addr+path)
			if err != nil || code != http.StatusUnauthorized {
				t.Errorf("GET %s without credentials = %d, %v; want 401", path, code, err)
			}
		}
	})

	t.Run("http with credentials lists the pushed tag", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+reg.Addr+"/v2/app/tags/list", nil)
		req.SetBasicAuth(reg.User, reg.Password.Reveal())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var tags struct{ Tags []string }
		if err := json.NewDecoder(resp.Body).Decode(&tags); err != nil || resp.StatusCode != 200 {
			t.Fatalf("tags/list = %d, %v", resp.StatusCode, err)
		}
		if len(tags.Tags) != 1 || tags.Tags[0] != "v1" {
			t.Fatalf("tags = %v, want [v1]", tags.Tags)
		}
	})

	t.Run("docker pull without credentials is refused", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := runDocker(ctx, t.TempDir(), nil, "pull", "--quiet", im.Ref)
		if err == nil {
			t.Fatal("anonymous docker pull succeeded")
		}
		if msg := err.Error(); !strings.Contains(msg, "no basic auth credentials") && !strings.Contains(msg, "unauthorized") {
			t.Fatalf("anonymous pull failed, but not for want of credentials: %v", err)
		}
		if LocalImageExists(t, im.Ref) {
			t.Fatalf("%s is local after a refused pull", im.Ref)
		}
	})

	t.Run("docker pull with credentials", func(t *testing.T) {
		docker(t, reg.DockerConfig(t), "pull", "--quiet", im.Ref)
		if !LocalImageExists(t, im.Ref) {
			t.Fatalf("%s not local after an authenticated pull", im.Ref)
		}
	})

	t.Run("password stays out of argv and printing", func(t *testing.T) {
		pw := reg.Password.Reveal()
		if s := strings.Join([]string{reg.Password.String(), reg.User, reg.Addr}, " "); strings.Contains(s, pw) {
			t.Fatalf("password printed: %q", s)
		}
		// Every process on the machine: neither the registry nor docker login saw it in argv.
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			b, err := os.ReadFile(p)
			if err == nil && strings.Contains(string(b), pw) {
				t.Fatalf("password in the argv of %s", p)
			}
		}
		// The htpasswd file holds a bcrypt hash, not the password.
		b, err := os.ReadFile(filepath.Join(reg.Server().Dir(), "htpasswd"))
		if err != nil || strings.Contains(string(b), pw) || !strings.HasPrefix(string(b), reg.User+":$2") {
			t.Fatalf("htpasswd = %q, %v; want %s:<bcrypt>", b, err, reg.User)
		}
	})
}
