package dockercli

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeDocker puts a `docker` script first on PATH; it logs every call (argv, DOCKER_CONFIG,
// stdin) to a file and answers what body says.
func fakeDocker(t *testing.T, body string) (log string) {
	t.Helper()
	dir := t.TempDir()
	log = filepath.Join(dir, "calls")
	sh := "#!/bin/sh\nin=$(cat)\necho \"$* | cfg=${DOCKER_CONFIG:-} | in=$in\" >> " + log + "\n" + body + "\n"
	if err := os.WriteFile(filepath.Join(dir, "docker"), []byte(sh), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	t.Setenv("DOCKER_CONFIG", "")
	return log
}

func calls(t *testing.T, log string) []string {
	t.Helper()
	b, _ := os.ReadFile(log)
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func TestRun(t *testing.T) {
	log := fakeDocker(t, `case "$1" in
  login) echo ok ;;
  version) echo "cannot connect to the docker daemon" >&2; exit 1 ;;
esac`)
	ctx := context.Background()
	out, err := Run(ctx, "/cfg", []byte("pw-on-stdin"), "login", "--username", "u", "--password-stdin", "127.0.0.1:5000")
	if err != nil || out != "ok\n" {
		t.Fatalf("Run = %q, %v", out, err)
	}
	if got := calls(t, log)[0]; got != "login --username u --password-stdin 127.0.0.1:5000 | cfg=/cfg | in=pw-on-stdin" {
		t.Errorf("call = %q", got)
	}
	_, err = ServerVersion(ctx)
	if err == nil || !strings.Contains(err.Error(), "does not answer") || !strings.Contains(err.Error(), "cannot connect") {
		t.Errorf("ServerVersion = %v, want the engine's own words", err)
	}
}

func TestRemoveProject(t *testing.T) {
	for _, tc := range []struct {
		name     string
		body     string
		wantErr  string
		wantRm   []string
		wantLeft int
	}{
		{"nothing left after down", `exit 0`, "", nil, 0},
		{"leftovers removed by label", `case "$1 $2" in
  "ps -aq") if [ -f ` + "$0.removed" + ` ]; then :; else echo c1; fi ;;
  "rm -f") touch "$0.removed" ;;
esac`, "", []string{"rm -f -v c1"}, 0},
		{"a leftover that will not go", `case "$1 $2" in
  "volume ls") echo v1 ;;
esac`, "still present", []string{"volume rm -f v1"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			log := fakeDocker(t, tc.body)
			left, err := RemoveProject(context.Background(), "monky-env-x")
			if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) || len(left) != tc.wantLeft {
				t.Fatalf("RemoveProject = %v, %v", left, err)
			}
			cs := calls(t, log)
			if !strings.HasPrefix(cs[0], "compose -p monky-env-x down -v --remove-orphans") || strings.Contains(cs[0], "cfg= |") {
				t.Errorf("first call %q: want compose down with its own empty DOCKER_CONFIG", cs[0])
			}
			for _, want := range tc.wantRm {
				found := false
				for _, c := range cs {
					found = found || strings.HasPrefix(c, want+" |")
				}
				if !found {
					t.Errorf("no %q among %q", want, cs)
				}
			}
		})
	}
}

func TestFirstWords(t *testing.T) {
	if got := FirstWords([]string{"login", "--username", "u", "--password", "x"}, 3); got != "login --username u" {
		t.Errorf("FirstWords = %q", got)
	}
}
