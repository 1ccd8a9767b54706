package release

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const (
	shaA = "aaaa000000000000000000000000000000000000000000000000000000000001"
	shaB = "bbbb000000000000000000000000000000000000000000000000000000000002"
	shaC = "cccc000000000000000000000000000000000000000000000000000000000003"
)

func bundle(tag string) map[string]string {
	return map[string]string{
		"bundle.json":        `{"compose_file":"docker-compose.yml","tag":"` + tag + `"}`,
		"docker-compose.yml": "services:\n  api:\n    image: harbor.tikali.net/monky/api:" + tag + "\n",
		".env.template":      "API_KEY=${API_KEY}\n",
		"config/nginx.conf":  "server { listen 80; } # " + tag,
		"config/deep/x.txt":  tag,
	}
}

// setHook installs a step hook for the duration of the test.
func setHook(t *testing.T, h func(step string) error) {
	t.Helper()
	old := hook
	hook = h
	t.Cleanup(func() { hook = old })
}

// noExchange makes the filesystem look like one without RENAME_EXCHANGE.
func noExchange(t *testing.T) {
	t.Helper()
	old := exchange
	exchange = func(string, string) error { return unix.EINVAL }
	t.Cleanup(func() { exchange = old })
}

func TestStageLayoutAndModes(t *testing.T) {
	env := t.TempDir()
	files := bundle("v1")
	dir, _, err := Stage(env, shaA, files, "API_KEY=k1\n")
	if err != nil {
		t.Fatalf("Stage: %v", err)
	}
	if want := filepath.Join(env, "releases", shaA); dir != want {
		t.Errorf("dir = %q, want %q", dir, want)
	}
	want := map[string]string{".env": "API_KEY=k1\n"}
	for p, c := range files {
		want[p] = c
	}
	got := readTree(t, dir)
	if !mapsEqual(got, want) {
		t.Errorf("staged tree = %v, want %v", keys(got), keys(want))
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		wantMode := fs.FileMode(0o600)
		if d.IsDir() {
			wantMode = 0o700
		}
		if info.Mode().Perm() != wantMode {
			t.Errorf("%s: mode %v, want %v", p, info.Mode().Perm(), wantMode)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if leftovers := hidden(t, env); len(leftovers) != 0 {
		t.Errorf("staging leftovers: %v", leftovers)
	}
}

func TestStageRefusesBadInput(t *testing.T) {
	const secretEnv = "API_KEY=s3cr3t-do-not-print\n"
	tests := []struct {
		name string
		sha  string
		path string
	}{
		{"empty path", shaA, ""},
		{"absolute path", shaA, "/etc/cron.d/x"},
		{"parent segment", shaA, "../outside"},
		{"parent segment inside", shaA, "config/../../outside"},
		{"empty segment", shaA, "config//x"},
		{"dot segment", shaA, "./x"},
		{"backslash", shaA, `config\x`},
		{"NUL", shaA, "x\x00y"},
		{"the rendered .env", shaA, ".env"},
		{"empty sha", "", "x"},
		{"uppercase sha", "AAAA", "x"},
		{"sha that walks", "../aa", "x"},
		{"sha too long", strings.Repeat("a", 65), "x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := t.TempDir()
			_, _, err := Stage(env, tt.sha, map[string]string{tt.path: "x", "docker-compose.yml": "services: {}\n"}, secretEnv)
			if err == nil {
				t.Fatal("Stage succeeded")
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("error carries the .env content: %v", err)
			}
			if entries, _ := os.ReadDir(env); len(entries) != 0 {
				t.Errorf("wrote %d entries into the env dir before refusing", len(entries))
			}
		})
	}
}

func TestStageConflictingPathsLeaveNothing(t *testing.T) {
	env := t.TempDir()
	_, _, err := Stage(env, shaA, map[string]string{"config": "a file", "config/x": "and a dir"}, "")
	if err == nil {
		t.Fatal("Stage succeeded with a file and a directory of the same name")
	}
	if _, err := os.Lstat(Dir(env, shaA)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a release exists under its final name after a failed Stage: %v", err)
	}
	if leftovers := hidden(t, env); len(leftovers) != 0 {
		t.Errorf("staging leftovers: %v", leftovers)
	}
}

// tamper replaces the staged config/nginx.conf of the release in dir with a link to a copy of it
// outside the environment, as a container with a writable bind of ./config could: the release
// still reads complete, but it is no longer as Stage made it.
func tamper(t *testing.T, dir string) {
	t.Helper()
	p := filepath.Join(dir, "config", "nginx.conf")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	copyOut := filepath.Join(t.TempDir(), "nginx.conf")
	if err := os.WriteFile(copyOut, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(copyOut, p); err != nil {
		t.Fatal(err)
	}
}

// writeAppData writes what an app's writable bind of ./data would: a file and a nested one.
func writeAppData(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "data", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for p, c := range map[string]string{"data/db": "rows\n", "data/sub/x": "nested\n"} {
		if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(p)), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// checkAppData asserts the app's entries written by writeAppData are there, unchanged.
func checkAppData(t *testing.T, dir, when string) {
	t.Helper()
	for p, c := range map[string]string{"data/db": "rows\n", "data/sub/x": "nested\n"} {
		if b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p))); err != nil || string(b) != c {
			t.Errorf("%s: %s = %q, %v; want the app's %q", when, p, b, err, c)
		}
	}
}

func TestRestageReplacesTheRelease(t *testing.T) {
	for _, fallback := range []bool{false, true} {
		t.Run(fmt.Sprintf("without RENAME_EXCHANGE=%v", fallback), func(t *testing.T) {
			if fallback {
				noExchange(t)
			}
			env := t.TempDir()
			if _, _, err := Stage(env, shaA, bundle("v1"), "API_KEY=old\n"); err != nil {
				t.Fatal(err)
			}
			if err := Promote(env, shaA); err != nil {
				t.Fatal(err)
			}
			dir, distrusted, err := Stage(env, shaA, bundle("v1"), "API_KEY=rotated\n")
			if err != nil || distrusted != nil {
				t.Fatalf("re-Stage: %v (distrusted: %v)", err, distrusted)
			}
			b, err := os.ReadFile(filepath.Join(dir, ".env"))
			if err != nil || string(b) != "API_KEY=rotated\n" {
				t.Errorf(".env = %q, %v; want the new rendering", b, err)
			}
			if leftovers := hidden(t, env); len(leftovers) != 0 {
				t.Errorf("leftovers: %v", leftovers)
			}
			if sha, _, err := Current(env); sha != shaA || err != nil {
				t.Errorf("Current = %q, %v", sha, err)
			}
		})
	}
}

// Re-staging a sha already on disk (a state save that failed after a healthy apply, a retry, a
// rollback) rewrites the staged files and .env in place and leaves what the app wrote alone.
func TestRestageKeepsAppData(t *testing.T) {
	env := t.TempDir()
	dir, _, err := Stage(env, shaA, bundle("v1"), "API_KEY=old\n")
	if err != nil {
		t.Fatal(err)
	}
	if err := Promote(env, shaA); err != nil {
		t.Fatal(err)
	}
	writeAppData(t, dir)
	before, err := os.Lstat(filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	// a staged file the app rewrote is put back: it is the bundle's
	if err := os.WriteFile(filepath.Join(dir, "config", "nginx.conf"), []byte("edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, distrusted, err := Stage(env, shaA, bundle("v1"), "API_KEY=rotated\n")
	if err != nil || distrusted != nil || got != dir {
		t.Fatalf("re-Stage = %q, %v, %v; want %q in place", got, distrusted, err, dir)
	}
	checkAppData(t, dir, "after the re-stage")
	if after, err := os.Lstat(filepath.Join(dir, "data")); err != nil || !os.SameFile(before, after) {
		t.Errorf("data/ is not the app's own directory any more: %v", err)
	}
	tree := readTree(t, dir)
	for p, c := range bundle("v1") {
		if tree[p] != c {
			t.Errorf("%s = %q, want the bundle's %q", p, tree[p], c)
		}
	}
	if tree[".env"] != "API_KEY=rotated\n" {
		t.Errorf(".env = %q, want the new rendering", tree[".env"])
	}
	if fi, err := os.Lstat(filepath.Join(dir, "config", "nginx.conf")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("config/nginx.conf mode = %v, %v; want 0600", fi, err)
	}
	if h := hidden(t, env); len(h) != 0 {
		t.Errorf("leftovers: %v", h)
	}
}

// A kill in the middle of an in-place re-stage (a failure injected after each step, and the
// temp files a write killed between its create and its rename leaves) leaves a usable release
// and the app's data; the next Stage completes and sweeps the temp files.
func TestRestageInterruptedKeepsAppData(t *testing.T) {
	steps := []string{"restage-checked", "file-rewritten", "env-rewritten"}
	for _, step := range steps {
		for n := 1; n <= len(bundle("v1")); n++ {
			if step != "file-rewritten" && n > 1 {
				break
			}
			t.Run(fmt.Sprintf("%s#%d", step, n), func(t *testing.T) {
				env := t.TempDir()
				dir, _, err := Stage(env, shaA, bundle("v1"), "K=old\n")
				if err != nil {
					t.Fatal(err)
				}
				if err := Promote(env, shaA); err != nil {
					t.Fatal(err)
				}
				writeAppData(t, dir)
				injected := errors.New("injected failure")
				seen := 0
				setHook(t, func(s string) error {
					if s == step {
						if seen++; seen == n {
							return injected
						}
					}
					return nil
				})
				if _, _, err := Stage(env, shaA, bundle("v1"), "K=new\n"); !errors.Is(err, injected) {
					t.Fatalf("err = %v, want the injected failure", err)
				}
				setHook(t, func(string) error { return nil })
				checkAppData(t, dir, "after the kill")
				tree := readTree(t, dir)
				for _, p := range []string{"data/db", "data/sub/x"} {
					delete(tree, p)
				}
				if !mapsEqual(withoutEnv(tree), bundle("v1")) {
					t.Errorf("after the kill the release is not complete: %v", keys(tree))
				}
				if e := tree[".env"]; e != "K=old\n" && e != "K=new\n" {
					t.Errorf(".env after the kill = %q", e)
				}
				// what a kill inside a write would have left
				for _, p := range []string{"config/.nginx.conf.tmp-00112233445566ff", "..env.tmp-00112233445566ff"} {
					if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(p)), []byte("half"), 0o600); err != nil {
						t.Fatal(err)
					}
				}
				if _, distrusted, err := Stage(env, shaA, bundle("v1"), "K=new\n"); err != nil || distrusted != nil {
					t.Fatalf("the next Stage: %v (distrusted: %v)", err, distrusted)
				}
				checkAppData(t, dir, "after the next Stage")
				tree = readTree(t, dir)
				delete(tree, "data/db")
				delete(tree, "data/sub/x")
				want := bundle("v1")
				want[".env"] = "K=new\n"
				if !mapsEqual(tree, want) {
					t.Errorf("after the next Stage: %v, want %v (temp files swept)", keys(tree), keys(want))
				}
			})
		}
	}
}

func withoutEnv(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		if k != ".env" {
			out[k] = v
		}
	}
	return out
}

// A release directory that is not as Stage made it is not trusted: Stage writes a fresh copy,
// says why, and never writes through what was planted.
func TestRestageDistrustsATamperedRelease(t *testing.T) {
	outsideFile := func(t *testing.T) string {
		p := filepath.Join(t.TempDir(), "victim")
		if err := os.WriteFile(p, []byte("keep"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := map[string]func(t *testing.T, dir string) string{
		"staged file is a symlink": func(t *testing.T, dir string) string {
			v := outsideFile(t)
			p := filepath.Join(dir, "docker-compose.yml")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(v, p); err != nil {
				t.Fatal(err)
			}
			return v
		},
		".env is a symlink": func(t *testing.T, dir string) string {
			v := outsideFile(t)
			p := filepath.Join(dir, ".env")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(v, p); err != nil {
				t.Fatal(err)
			}
			return v
		},
		"a directory on the way is a symlink": func(t *testing.T, dir string) string {
			out := t.TempDir()
			v := filepath.Join(out, "nginx.conf")
			if err := os.WriteFile(v, []byte("keep"), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.RemoveAll(filepath.Join(dir, "config")); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(out, filepath.Join(dir, "config")); err != nil {
				t.Fatal(err)
			}
			return v
		},
		"staged file is a directory": func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "config", "deep", "x.txt")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(p, 0o700); err != nil {
				t.Fatal(err)
			}
			return ""
		},
		"staged file is a FIFO": func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "bundle.json")
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
			return ""
		},
		"staged file is missing": func(t *testing.T, dir string) string {
			if err := os.Remove(filepath.Join(dir, ".env.template")); err != nil {
				t.Fatal(err)
			}
			return ""
		},
		"the release is a symlink": func(t *testing.T, dir string) string {
			out := filepath.Join(t.TempDir(), "r")
			if err := os.Rename(dir, out); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(out, dir); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(out, ".env")
		},
	}
	for name, plant := range cases {
		for _, fallback := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/without RENAME_EXCHANGE=%v", name, fallback), func(t *testing.T) {
				if fallback {
					noExchange(t)
				}
				env := t.TempDir()
				dir, _, err := Stage(env, shaA, bundle("v1"), "K=old\n")
				if err != nil {
					t.Fatal(err)
				}
				victim := plant(t, dir)
				var was []byte
				if victim != "" {
					if was, err = os.ReadFile(victim); err != nil {
						t.Fatal(err)
					}
				}
				got, distrusted, err := Stage(env, shaA, bundle("v1"), "K=new\n")
				if err != nil || distrusted == nil || got != dir {
					t.Fatalf("Stage = %q, %v, %v; want a fresh copy at %q and a reason", got, distrusted, err, dir)
				}
				wantWhy := map[string]string{
					"staged file is a symlink":            "docker-compose.yml is not a regular file (symlink)",
					".env is a symlink":                   ".env is not a regular file (symlink)",
					"a directory on the way is a symlink": "config is not a directory (symlink)",
					"staged file is a directory":          "config/deep/x.txt is not a regular file (directory)",
					"staged file is a FIFO":               "bundle.json is not a regular file (fifo)",
					"staged file is missing":              ".env.template is missing",
					"the release is a symlink":            shaA + " is not a directory (symlink)",
				}[name]
				if !strings.Contains(distrusted.Error(), wantWhy) {
					t.Errorf("distrusted = %v, want it to say %q", distrusted, wantWhy)
				}
				if strings.Contains(distrusted.Error(), "K=new") {
					t.Errorf("the reason carries the rendered .env: %v", distrusted)
				}
				if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
					t.Fatalf("release after the fresh copy: %v, %v; want a directory", fi, err)
				}
				want := bundle("v1")
				want[".env"] = "K=new\n"
				if tree := readTree(t, dir); !mapsEqual(tree, want) {
					t.Errorf("fresh copy = %v, want %v", keys(tree), keys(want))
				}
				if victim != "" {
					if now, err := os.ReadFile(victim); err != nil || string(now) != string(was) {
						t.Errorf("the planted link's target was written: %q, %v", now, err)
					}
				}
				if h := hidden(t, env); len(h) != 0 {
					t.Errorf("leftovers: %v", h)
				}
			})
		}
	}
}

func TestPromoteAndCurrent(t *testing.T) {
	env := t.TempDir()
	if sha, dir, err := Current(env); sha != "" || dir != "" || err != nil {
		t.Errorf("Current before any promote = %q, %q, %v; want empty", sha, dir, err)
	}
	for _, sha := range []string{shaA, shaB} {
		if _, _, err := Stage(env, sha, bundle(sha[:4]), "K=v\n"); err != nil {
			t.Fatal(err)
		}
		if err := Promote(env, sha); err != nil {
			t.Fatalf("Promote(%s): %v", sha[:4], err)
		}
		target, err := os.Readlink(filepath.Join(env, "current"))
		if err != nil || target != "releases/"+sha {
			t.Errorf("current → %q, %v; want the relative releases/%s", target, err, sha[:4])
		}
		got, dir, err := Current(env)
		if got != sha || dir != Dir(env, sha) || err != nil {
			t.Errorf("Current = %q, %q, %v", got, dir, err)
		}
	}
	if err := Promote(env, shaC); err == nil {
		t.Error("Promote of a release never staged succeeded")
	}
	if got, _, _ := Current(env); got != shaB {
		t.Errorf("a failed Promote moved current to %q", got)
	}
	if leftovers := hidden(t, env); len(leftovers) != 0 {
		t.Errorf("leftovers: %v", leftovers)
	}
}

func TestCurrentOddLinks(t *testing.T) {
	tests := []struct {
		name        string
		setup       func(env string) error
		wantSha     string
		wantErr     bool
		wantDangled bool
	}{
		{"absolute target from an older agent", func(env string) error {
			if err := os.MkdirAll(Dir(env, shaA), 0o700); err != nil {
				return err
			}
			return os.Symlink(Dir(env, shaA), filepath.Join(env, "current"))
		}, shaA, false, false},
		{"dangling", func(env string) error {
			return os.Symlink("releases/"+shaA, filepath.Join(env, "current"))
		}, shaA, true, true},
		{"points outside releases", func(env string) error {
			return os.Symlink("/etc", filepath.Join(env, "current"))
		}, "", true, false},
		{"relative path that walks out", func(env string) error {
			return os.Symlink("../other/releases/"+shaA, filepath.Join(env, "current"))
		}, "", true, false},
		{"a regular file", func(env string) error {
			return os.WriteFile(filepath.Join(env, "current"), []byte(shaA), 0o600)
		}, "", true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := t.TempDir()
			if err := tt.setup(env); err != nil {
				t.Fatal(err)
			}
			sha, _, err := Current(env)
			if (err != nil) != tt.wantErr || errors.Is(err, ErrDangling) != tt.wantDangled || sha != tt.wantSha {
				t.Errorf("Current = %q, %v; want %q (error %v, dangling %v)", sha, err, tt.wantSha, tt.wantErr, tt.wantDangled)
			}
		})
	}
}

func TestPrune(t *testing.T) {
	shas := []string{shaA, shaB, shaC, "dd04", "ee05"}
	tests := []struct {
		name    string
		keep    []string
		current string
		want    []string // releases left
	}{
		{"keeps current and the named previous", []string{"dd04"}, "ee05", []string{"dd04", "ee05"}},
		{"never the current one, even unnamed", []string{"ee05"}, shaA, []string{shaA, "ee05"}},
		{"nothing named leaves only current", nil, shaB, []string{shaB}},
		{"a named release that is gone is no error", []string{"ff06", shaC}, shaA, []string{shaA, shaC}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := t.TempDir()
			for _, sha := range shas {
				if _, _, err := Stage(env, sha, bundle(sha), "SECRET=old-"+sha+"\n"); err != nil {
					t.Fatal(err)
				}
			}
			if err := Promote(env, tt.current); err != nil {
				t.Fatal(err)
			}
			// Leftovers of crashed runs, and things Prune must not touch.
			for _, p := range []string{"releases/." + shaA + ".tmp-123", "releases/." + shaB + ".old-9", "releases/notes", "current.tmp-abc"} {
				full := filepath.Join(env, p)
				if strings.HasPrefix(p, "current") {
					if err := os.Symlink("releases/"+shaA, full); err != nil {
						t.Fatal(err)
					}
				} else if err := os.MkdirAll(full, 0o700); err != nil {
					t.Fatal(err)
				}
			}
			removed, err := Prune(env, tt.keep)
			if err != nil {
				t.Fatalf("Prune: %v", err)
			}
			var left []string
			entries, _ := os.ReadDir(filepath.Join(env, "releases"))
			for _, e := range entries {
				if checkSha(e.Name()) == nil {
					left = append(left, e.Name())
				}
			}
			want := slices.Clone(tt.want)
			sort.Strings(want)
			if !slices.Equal(left, want) {
				t.Errorf("left %v, want %v", left, want)
			}
			if h := hidden(t, env); len(h) != 0 {
				t.Errorf("leftovers survived Prune: %v", h)
			}
			if _, err := os.Stat(filepath.Join(env, "releases", "notes")); err != nil {
				t.Errorf("Prune removed an entry it does not own: %v", err)
			}
			if wantRemoved := len(shas) - len(tt.want) + 3; len(removed) != wantRemoved {
				t.Errorf("removed %d paths %v, want %d", len(removed), removed, wantRemoved)
			}
			if sha, _, err := Current(env); sha != tt.current || err != nil {
				t.Errorf("Current after Prune = %q, %v", sha, err)
			}
		})
	}
	t.Run("a kept name that is no sha", func(t *testing.T) {
		env := t.TempDir()
		if _, _, err := Stage(env, shaA, bundle(shaA), ""); err != nil {
			t.Fatal(err)
		}
		if _, err := Prune(env, []string{"../x"}); err == nil || !strings.Contains(err.Error(), "keep") {
			t.Errorf("Prune(../x) = %v, want an error naming keep", err)
		}
		if _, err := os.Stat(Dir(env, shaA)); err != nil {
			t.Errorf("a refused Prune removed a release: %v", err)
		}
	})
	t.Run("nothing staged yet", func(t *testing.T) {
		if removed, err := Prune(t.TempDir(), nil); err != nil || len(removed) != 0 {
			t.Errorf("Prune = %v, %v", removed, err)
		}
	})
}

// TestCrashSafety runs every Stage and Promote scenario with a hook at each step. At every step
// (the state a crash there would leave) `current` must resolve to a complete release and every
// release under its final name must be complete; then a failure injected at that step must leave
// the previous release current and no staging directory behind.
func TestCrashSafety(t *testing.T) {
	oldFiles, newFiles := bundle("v1"), bundle("v2")
	type scenario struct {
		name     string
		fallback bool
		tamper   string // a release to tamper with before op (see tamper)
		op       func(env string) error
		steps    []string
		// wantCurrentAfterFailure is where current must point after an injected failure;
		// "" means it depends on the step (see below).
		wantCurrentAfterFailure string
	}
	scenarios := []scenario{
		{
			name:                    "stage a new release",
			op:                      func(env string) error { _, _, err := Stage(env, shaB, newFiles, "K=new\n"); return err },
			steps:                   []string{"staging-created", "file-written", "env-written", "synced", "renamed"},
			wantCurrentAfterFailure: shaA,
		},
		{
			name:                    "re-stage the current release in place",
			op:                      func(env string) error { _, _, err := Stage(env, shaA, oldFiles, "K=new\n"); return err },
			steps:                   []string{"restage-checked", "file-rewritten", "env-rewritten"},
			wantCurrentAfterFailure: shaA,
		},
		{
			name:                    "re-stage a tampered current release",
			tamper:                  shaA,
			op:                      func(env string) error { _, _, err := Stage(env, shaA, oldFiles, "K=new\n"); return err },
			steps:                   []string{"staging-created", "file-written", "env-written", "synced", "exchanged"},
			wantCurrentAfterFailure: shaA,
		},
		{
			name:                    "re-stage a tampered release not current, without RENAME_EXCHANGE",
			fallback:                true,
			tamper:                  shaC,
			op:                      func(env string) error { _, _, err := Stage(env, shaC, bundle("v3"), "K=new\n"); return err },
			steps:                   []string{"staging-created", "file-written", "env-written", "synced", "aside", "renamed"},
			wantCurrentAfterFailure: shaA,
		},
		{
			name: "stage and promote a new release",
			op: func(env string) error {
				if _, _, err := Stage(env, shaB, newFiles, "K=new\n"); err != nil {
					return err
				}
				return Promote(env, shaB)
			},
			steps:                   []string{"link-created", "link-swapped"},
			wantCurrentAfterFailure: "", // link-created: A; link-swapped: B (the swap happened)
		},
	}
	contents := map[string]map[string]string{shaA: oldFiles, shaB: newFiles, shaC: bundle("v3")}
	envs := []string{"K=old\n", "K=new\n"}

	for _, sc := range scenarios {
		for _, step := range sc.steps {
			for _, inject := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/%s/fail=%v", sc.name, step, inject), func(t *testing.T) {
					if sc.fallback {
						noExchange(t)
					}
					env := t.TempDir()
					if _, _, err := Stage(env, shaA, oldFiles, "K=old\n"); err != nil {
						t.Fatal(err)
					}
					if _, _, err := Stage(env, shaC, bundle("v3"), "K=old\n"); err != nil {
						t.Fatal(err)
					}
					if err := Promote(env, shaA); err != nil {
						t.Fatal(err)
					}
					if sc.tamper != "" {
						tamper(t, Dir(env, sc.tamper))
					}
					injected := errors.New("injected failure")
					seen := 0
					setHook(t, func(s string) error {
						if s != step {
							return nil
						}
						seen++
						checkConsistent(t, env, contents, envs, "at step "+s)
						if inject && seen == 1 {
							return injected
						}
						return nil
					})
					err := sc.op(env)
					if seen == 0 {
						t.Fatalf("step %q was never reached", step)
					}
					checkConsistent(t, env, contents, envs, "after the operation")
					if !inject {
						if err != nil {
							t.Errorf("operation failed without an injected failure: %v", err)
						}
						return
					}
					if !errors.Is(err, injected) {
						t.Errorf("err = %v, want the injected failure", err)
					}
					want := sc.wantCurrentAfterFailure
					if want == "" {
						want = map[string]string{"link-created": shaA, "link-swapped": shaB}[step]
					}
					if sha, _, err := Current(env); sha != want || err != nil {
						t.Errorf("after a failure at %s: current = %q, %v; want %q", step, sha, err, want)
					}
					if sc.name == "stage a new release" && step != "renamed" {
						if _, err := os.Lstat(Dir(env, shaB)); !errors.Is(err, fs.ErrNotExist) {
							t.Errorf("release B exists under its final name after a failure at %s", step)
						}
					}
					if h := hidden(t, env); len(h) != 0 {
						t.Errorf("leftovers after a failure at %s: %v", step, h)
					}
				})
			}
		}
	}
}

// checkConsistent asserts what a crash at this instant would leave: current on a complete
// release, and every release under its final name complete.
func checkConsistent(t *testing.T, env string, contents map[string]map[string]string, envs []string, when string) {
	t.Helper()
	sha, dir, err := Current(env)
	if err != nil || sha == "" {
		t.Errorf("%s: Current = %q, %v", when, sha, err)
	} else if !complete(t, dir, contents[sha], envs) {
		t.Errorf("%s: current release %s is incomplete", when, sha[:4])
	}
	entries, err := os.ReadDir(filepath.Join(env, "releases"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if checkSha(e.Name()) != nil {
			continue
		}
		if !complete(t, filepath.Join(env, "releases", e.Name()), contents[e.Name()], envs) {
			t.Errorf("%s: release %s is under its final name but incomplete: %v", when, e.Name()[:4], keys(readTree(t, filepath.Join(env, "releases", e.Name()))))
		}
	}
}

func complete(t *testing.T, dir string, files map[string]string, envs []string) bool {
	t.Helper()
	got := readTree(t, dir)
	envContent, ok := got[".env"]
	if !ok || !slices.Contains(envs, envContent) {
		return false
	}
	delete(got, ".env")
	return mapsEqual(got, files)
}

func readTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(rel)] = string(b)
		return nil
	})
	if err != nil {
		t.Fatalf("read %s: %v", dir, err)
	}
	return out
}

// hidden lists staging leftovers: hidden entries under releases/ and temporary links.
func hidden(t *testing.T, env string) []string {
	t.Helper()
	var out []string
	entries, _ := os.ReadDir(filepath.Join(env, "releases"))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			out = append(out, "releases/"+e.Name())
		}
	}
	links, _ := filepath.Glob(filepath.Join(env, "current.tmp-*"))
	return append(out, links...)
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func keys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// Without RENAME_EXCHANGE, replacing a distrusted current release has a window between two renames in
// which releases/<sha> is absent (documented on Stage). A failure inside that window must put
// the previous copy back.
func TestFallbackRestoresTheCurrentReleaseOnFailure(t *testing.T) {
	noExchange(t)
	env := t.TempDir()
	if _, _, err := Stage(env, shaA, bundle("v1"), "K=old\n"); err != nil {
		t.Fatal(err)
	}
	if err := Promote(env, shaA); err != nil {
		t.Fatal(err)
	}
	tamper(t, Dir(env, shaA)) // a trusted release is re-staged in place, without renames
	injected := errors.New("injected failure")
	setHook(t, func(s string) error {
		if s == "aside" {
			return injected
		}
		return nil
	})
	if _, _, err := Stage(env, shaA, bundle("v1"), "K=new\n"); !errors.Is(err, injected) {
		t.Fatalf("err = %v, want the injected failure", err)
	}
	sha, dir, err := Current(env)
	if sha != shaA || err != nil {
		t.Fatalf("Current = %q, %v", sha, err)
	}
	if !complete(t, dir, bundle("v1"), []string{"K=old\n"}) {
		t.Error("the previous copy was not restored intact")
	}
	if h := hidden(t, env); len(h) != 0 {
		t.Errorf("leftovers: %v", h)
	}
}

func FuzzCheckPath(f *testing.F) {
	for _, s := range []string{"docker-compose.yml", "config/nginx.conf", "../x", "/etc/passwd", "a//b", ".env", "a/.env", "..", "a/..", `a\b`, "a/./b", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if checkPath(p) != nil {
			return
		}
		root := filepath.FromSlash("/r")
		joined := filepath.Join(root, filepath.FromSlash(p))
		if !strings.HasPrefix(joined, root+string(filepath.Separator)) {
			t.Errorf("accepted %q, which lands at %q outside the release", p, joined)
		}
		if joined == filepath.Join(root, EnvFile) {
			t.Errorf("accepted %q, which overwrites the rendered .env", p)
		}
	})
}

// A staged release is durable before it is renamed into place: the staging directory and every
// directory under it are synced (a crash after the rename must not find config/deep empty), then
// releases/ for the rename itself.
func TestStageSyncsEveryDirectoryBeforeTheRename(t *testing.T) {
	env := t.TempDir()
	var synced []string
	renamed := false
	old := syncDir
	syncDir = func(d string) error {
		rel, err := filepath.Rel(filepath.Join(env, ReleasesDir), d)
		if err != nil {
			t.Fatal(err)
		}
		if renamed {
			rel = "after the rename: " + rel
		} else if first, rest, _ := strings.Cut(filepath.ToSlash(rel), "/"); strings.HasPrefix(first, "."+shaA+".tmp-") {
			rel = "staging/" + rest
		}
		synced = append(synced, rel)
		return old(d)
	}
	t.Cleanup(func() { syncDir = old })
	setHook(t, func(step string) error {
		renamed = renamed || step == "renamed"
		return nil
	})
	if _, _, err := Stage(env, shaA, bundle("v1"), "API_KEY=k1\n"); err != nil {
		t.Fatalf("Stage: %v", err)
	}
	slices.Sort(synced)
	want := []string{"after the rename: .", "staging/", "staging/config", "staging/config/deep"}
	if !slices.Equal(synced, want) {
		t.Errorf("synced %q, want %q", synced, want)
	}
}

// checkSha's edges: every hex digit, 1 and 64 digits in; none, 65, upper case and what is no
// hex digit out (a bound off by one refused the 9s and fs of real shas, or let `g` in).
func TestCheckSha(t *testing.T) {
	for _, ok := range []string{"0123456789abcdef", "9", "f", "a", "0", strings.Repeat("f", 64)} {
		if err := checkSha(ok); err != nil {
			t.Errorf("checkSha(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", strings.Repeat("a", 65), "A", "g", "/", ":", "`", ".", "..", "a/b"} {
		if err := checkSha(bad); err == nil {
			t.Errorf("checkSha(%q) accepted", bad)
		}
	}
}

// OpenRoot opens a release directory (through a symlink too) and refuses anything else at once:
// os.OpenRoot's plain open of a FIFO waits for a writer.
func TestOpenRootRefusesAFIFOAtOnce(t *testing.T) {
	dir := t.TempDir()
	real, link, fifo := filepath.Join(dir, "real"), filepath.Join(dir, "link"), filepath.Join(dir, "fifo")
	if err := os.Mkdir(real, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(real, "f"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", link); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{real, link} {
		root, err := OpenRoot(p)
		if err != nil {
			t.Fatalf("OpenRoot(%s): %v", p, err)
		}
		if b, err := root.ReadFile("f"); err != nil || string(b) != "x" {
			t.Errorf("OpenRoot(%s): f reads %q, %v", p, b, err)
		}
		root.Close()
	}
	done := make(chan error, 1)
	go func() {
		root, err := OpenRoot(fifo)
		if err == nil {
			root.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, unix.ENOTDIR) {
			t.Errorf("OpenRoot(a FIFO) = %v, want ENOTDIR", err)
		}
	case <-time.After(10 * time.Second):
		if w, err := os.OpenFile(fifo, os.O_WRONLY|unix.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		t.Fatal("OpenRoot(a FIFO) still waits after 10 s")
	}
}
