//go:build integration

package itest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestComposeRunsPushedImage: images pushed to the password-protected registry and removed
// locally are pulled by `docker compose up` (with the logged-in DOCKER_CONFIG), become healthy
// — one through the image's own HEALTHCHECK, one through the compose healthcheck only after a
// "starting" phase — and hand the app its
// environment byte for byte. A service with APP_HEALTHY=false goes unhealthy and `up --wait`
// says so.
func TestComposeRunsPushedImage(t *testing.T) {
	c := Compose(t)
	reg := StartRegistry(t)
	images := BuildImages(t, reg, "v1", "v2")
	for _, im := range images {
		im.RemoveLocal(t)
	}
	v1, v2 := images[0], images[1]

	tricky := `p@ss "word" $HOME ${X} 'q' # not a comment`
	t.Run("healthy", func(t *testing.T) {
		project := ProjectName()
		CleanupProject(t, project)
		dir := t.TempDir()
		write(t, dir, "docker-compose.yml", AppCompose(
			AppService{Name: "api", Image: v1.Ref, Env: map[string]string{"TRICKY": tricky}, ImageHealthcheck: true},
			AppService{Name: "slow", Image: v2.Ref, Env: map[string]string{"APP_READY_AFTER_MS": "1500"}},
		))
		if out, err := c.Run(t, dir, reg.DockerConfig(t), project, "up", "-d", "--wait", "--wait-timeout", "120"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		got := Containers(t, project)
		if len(got) != 2 {
			t.Fatalf("containers = %+v, want api and slow", got)
		}
		for _, ct := range got {
			if ct.State != "running" || ct.Health != "healthy" {
				t.Errorf("%s: state=%s health=%s, want running healthy", ct.Name, ct.State, ct.Health)
			}
		}
		api, slow := got[0], got[1]
		if api.Service != "api" || slow.Service != "slow" || api.Image != v1.Ref || slow.Image != v2.Ref {
			t.Fatalf("containers = %+v", got)
		}
		// api's compose service has no healthcheck: "healthy" is the image's HEALTHCHECK at work.
		hc := docker(t, "", "image", "inspect", "--format", "{{json .Config.Healthcheck}}", v1.Ref)
		if !strings.Contains(hc, `"Test":["CMD","/app","-check"]`) {
			t.Errorf("image %s carries healthcheck %s, want /app -check", v1.Ref, hc)
		}
		// The slow one failed its check while APP_READY_AFTER_MS ran, then passed. docker keeps
		// only the last five health results, so the failure is read from the app's own log.
		if logs := docker(t, "", "logs", slow.Name); !strings.Contains(logs, "healthz: starting") {
			t.Errorf("slow container's log shows no failed check while starting:\n%s", logs)
		}
		for _, tc := range []struct{ container, path, want string }{
			{api.Name, "/version", "v1"},
			{slow.Name, "/version", "v2"},
			{api.Name, "/env?name=TRICKY", tricky},
		} {
			out, err := AppGet(t, tc.container, tc.path)
			if err != nil || out != tc.want {
				t.Errorf("%s %s = %q, %v; want %q", tc.container, tc.path, out, err, tc.want)
			}
		}
		if _, err := AppGet(t, api.Name, "/env?name=UNSET_VAR"); err == nil {
			t.Errorf("/env of an unset variable answered 200")
		}
	})

	t.Run("unhealthy", func(t *testing.T) {
		project := ProjectName()
		CleanupProject(t, project)
		dir := t.TempDir()
		write(t, dir, "docker-compose.yml", AppCompose(
			AppService{Name: "sick", Image: v1.Ref, Env: map[string]string{"APP_HEALTHY": "false"}},
		))
		out, err := c.Run(t, dir, reg.DockerConfig(t), project, "up", "-d", "--wait", "--wait-timeout", "120")
		if err == nil {
			t.Fatalf("up --wait succeeded with an unhealthy service:\n%s", out)
		}
		if !strings.Contains(out, "unhealthy") {
			t.Errorf("up --wait failed without saying unhealthy: %v\n%s", err, out)
		}
		got := Containers(t, project)
		if len(got) != 1 || got[0].State != "running" || got[0].Health != "unhealthy" {
			t.Fatalf("containers = %+v, want one running unhealthy", got)
		}
	})
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestContainerStateHidesEnv: a failing test that prints containers prints no secret.
func TestContainerStateHidesEnv(t *testing.T) {
	c := ContainerState{ID: "0123456789abcdef", Name: "p-web-1", State: "running", Env: []string{"APP_SECRET=s3cret-value"}}
	for _, s := range []string{c.String(), fmt.Sprintf("%v %+v", c, map[string]ContainerState{"web": c})} {
		if strings.Contains(s, "s3cret-value") || !strings.Contains(s, "p-web-1") || !strings.Contains(s, "0123456789ab") {
			t.Errorf("printed %q", s)
		}
	}
}
