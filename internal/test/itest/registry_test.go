//go:build integration

package itest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestRegistryDemandsCredentials: an anonymous pull is refused, the same pull with the temporary
// logged-in DOCKER_CONFIG succeeds, and the password shows up nowhere it should not.
func TestRegistryDemandsCredentials(t *testing.T) {
	Require(t, PartDocker, PartRegistry, PartGo)
	// Every docker command of this test, the helpers' `docker login` included, is recorded as it
	// starts: a password in argv is seen while the process exists, not looked for after it exited.
	argvLog := recordDockerArgv(t)
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
		// The registry, still running, has it in neither argv nor environment.
		for _, f := range []string{"cmdline", "environ"} {
			b, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", reg.Server().Pid(), f))
			if err != nil || len(b) == 0 || strings.Contains(string(b), pw) {
				t.Fatalf("the registry's /proc %s: %v; holds the password: %v", f, err, strings.Contains(string(b), pw))
			}
		}
		// Every docker command run so far, as it started: the login took the password on stdin.
		log, err := os.ReadFile(argvLog)
		if err != nil {
			t.Fatal(err)
		}
		logins := 0
		for _, argv := range strings.Split(strings.TrimSpace(string(log)), "\n") {
			if strings.Contains(argv, pw) {
				t.Fatalf("password (masked here) in the argv of `docker %s`", strings.ReplaceAll(strings.ReplaceAll(argv, pw, "***"), "\x1f", " "))
			}
			if strings.HasPrefix(argv, "login\x1f") {
				logins++
				if !strings.Contains(argv, "\x1f--password-stdin\x1f") {
					t.Errorf("docker login without --password-stdin: %q", argv)
				}
			}
		}
		if logins == 0 {
			t.Fatalf("no docker login recorded, so none was checked:\n%s", log)
		}
		// The htpasswd file holds a bcrypt hash, not the password.
		b, err := os.ReadFile(filepath.Join(reg.Server().Dir(), "htpasswd"))
		if err != nil || strings.Contains(string(b), pw) || !strings.HasPrefix(string(b), reg.User+":$2") {
			t.Fatalf("htpasswd = %q, %v; want %s:<bcrypt>", b, err, reg.User)
		}
	})
}

// recordDockerArgv puts a docker in front of the real one on PATH for this test: it appends its
// arguments (separated by \x1f, one command a line) to the returned file, then runs the real
// docker with them.
func recordDockerArgv(t *testing.T) string {
	t.Helper()
	real, err := exec.LookPath("docker")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	log := filepath.Join(dir, "argv.log")
	script := "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\037' \"$a\" >> " + shellQuote(log) + "; done\necho >> " + shellQuote(log) + "\nexec " + shellQuote(real) + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "docker"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return log
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
