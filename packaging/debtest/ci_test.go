package debtest

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// moduleRoot is the repository root, the agent's module (tests run in packaging/debtest).
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root: %v", err)
	}
	return root
}

type ciRule struct {
	If           string `yaml:"if"`
	When         string `yaml:"when"`
	AllowFailure bool   `yaml:"allow_failure"`
}

type ciNeed struct {
	Job       string `yaml:"job"`
	Artifacts bool   `yaml:"artifacts"`
}

type ciJob struct {
	Stage     string   `yaml:"stage"`
	Script    []string `yaml:"script"`
	Rules     []ciRule `yaml:"rules"`
	Needs     []ciNeed `yaml:"needs"`
	Artifacts struct {
		Paths []string `yaml:"paths"`
	} `yaml:"artifacts"`
	// The runner a job asks for; loadCI fills them from the hidden jobs it extends.
	Extends   yaml.Node         `yaml:"extends"`
	Tags      []string          `yaml:"tags"`
	Variables map[string]string `yaml:"variables"`
}

// loadCI parses .gitlab-ci.yml: the top-level keywords, and every other key as a job.
func loadCI(t *testing.T) ([]string, map[string]ciJob) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(moduleRoot(t), ".gitlab-ci.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf(".gitlab-ci.yml does not parse: %v", err)
	}
	keywords := map[string]bool{"stages": true, "default": true, "variables": true, "cache": true, "workflow": true, "include": true}
	var stages []string
	jobs := map[string]ciJob{}
	hidden := map[string]ciJob{}
	for name, node := range doc {
		if name == "stages" {
			if err := node.Decode(&stages); err != nil {
				t.Fatalf("stages: %v", err)
			}
			continue
		}
		if keywords[name] {
			continue
		}
		var j ciJob
		if err := node.Decode(&j); err != nil {
			t.Fatalf("job %s: %v", name, err)
		}
		if strings.HasPrefix(name, ".") {
			hidden[name] = j
			continue
		}
		jobs[name] = j
	}
	// extends, one level deep as this file uses it: the job's own tags and variables win.
	for name, j := range jobs {
		var bases []string
		switch j.Extends.Kind {
		case 0:
		case yaml.ScalarNode:
			bases = []string{j.Extends.Value}
		default:
			if err := j.Extends.Decode(&bases); err != nil {
				t.Fatalf("job %s: extends: %v", name, err)
			}
		}
		for _, b := range bases {
			base, ok := hidden[b]
			if !ok {
				t.Fatalf("job %s extends %s, which is not a hidden job of the file", name, b)
			}
			if j.Tags == nil {
				j.Tags = base.Tags
			}
			for k, v := range base.Variables {
				if _, set := j.Variables[k]; !set {
					if j.Variables == nil {
						j.Variables = map[string]string{}
					}
					j.Variables[k] = v
				}
			}
		}
		jobs[name] = j
	}
	return stages, jobs
}

func TestGitLabCIShape(t *testing.T) {
	stages, jobs := loadCI(t)
	if strings.Join(stages, ",") != "test,package,release" {
		t.Errorf("stages %q", stages)
	}
	for name, stage := range map[string]string{"test": "test", "test:fuzz": "test", "test:integration": "test", "test:packaging": "test",
		"package": "package", "release": "release", "release:gitea": "release"} {
		j, ok := jobs[name]
		if !ok {
			t.Errorf("no job %s", name)
			continue
		}
		if j.Stage != stage {
			t.Errorf("job %s in stage %q, want %q", name, j.Stage, stage)
		}
		if len(j.Script) == 0 {
			t.Errorf("job %s has no script", name)
		}
		for _, n := range j.Needs {
			if _, ok := jobs[n.Job]; !ok {
				t.Errorf("job %s needs unknown job %s", name, n.Job)
			}
		}
	}
	rel := jobs["release"]
	if len(rel.Rules) != 1 || !strings.Contains(rel.Rules[0].If, "$CI_COMMIT_TAG") || rel.Rules[0].When == "manual" {
		t.Errorf("release must run automatically on every tag: %+v", rel.Rules)
	}
	if !strings.Contains(strings.Join(rel.Script, "\n"), "--target gitlab") {
		t.Errorf("release does not upload to gitlab: %q", rel.Script)
	}

	gitea := jobs["release:gitea"]
	if len(gitea.Rules) != 2 {
		t.Fatalf("release:gitea rules %+v", gitea.Rules)
	}
	auto, manual := gitea.Rules[0], gitea.Rules[1]
	if !strings.Contains(auto.If, "$CI_COMMIT_TAG") || !strings.Contains(auto.If, "$GITEA_TOKEN") || auto.When == "manual" {
		t.Errorf("release:gitea must be automatic on a tag when GITEA_TOKEN is set: %+v", auto)
	}
	if !strings.Contains(manual.If, "$CI_COMMIT_TAG") || strings.Contains(manual.If, "GITEA_TOKEN") || manual.When != "manual" || !manual.AllowFailure {
		t.Errorf("release:gitea must be manual (allowed to fail) on a tag otherwise: %+v", manual)
	}
	if !strings.Contains(strings.Join(gitea.Script, "\n"), "--target gitea") {
		t.Errorf("release:gitea does not upload to gitea: %q", gitea.Script)
	}

	pkg := jobs["package"]
	for _, want := range []string{"dist/*.deb", "dist/install.sh", "dist/SHA256SUMS"} {
		if !contains(pkg.Artifacts.Paths, want) {
			t.Errorf("package does not keep %s: %q", want, pkg.Artifacts.Paths)
		}
	}
	// lintian and the units' exposure scores gate every package built.
	if !strings.Contains(strings.Join(pkg.Script, "\n"), "make deb-check") {
		t.Errorf("package does not run make deb-check: %q", pkg.Script)
	}
	if !strings.Contains(strings.Join(jobs["test:packaging"].Script, "\n"), "make test-integration MODULES=packaging") {
		t.Error("test:packaging does not run packaging/'s integration-tagged tests (make test-integration MODULES=packaging)")
	}
}

// realPartsTag is the runner tag of the jobs that need the real parts (.gitlab-ci.yml's top).
const realPartsTag = "monky-real-parts"

// TestReleaseNeedsTheWholeSuite: a tag ships only what every test passed. The release needs
// every job of the test stage and the package, and those jobs run every step of .ci/run
// (CI's definition of the whole suite), each where it can: what needs the real parts on the
// real-parts runner, with CI set so that a missing part fails.
func TestReleaseNeedsTheWholeSuite(t *testing.T) {
	_, jobs := loadCI(t)
	needed := map[string]bool{}
	var need func(string)
	need = func(name string) {
		for _, n := range jobs[name].Needs {
			if !needed[n.Job] {
				needed[n.Job] = true
				need(n.Job)
			}
		}
	}
	need("release")
	for name, j := range jobs {
		if (j.Stage == "test" || j.Stage == "package") && !needed[name] {
			t.Errorf("release does not need %s (stage %s): a tag could ship what it did not pass; add it to release's needs", name, j.Stage)
		}
	}
	var steps []string
	for name := range needed {
		steps = append(steps, jobs[name].Script...)
	}
	// A script a make target runs (through its prerequisites too) is run by the job that runs
	// the target: make test-integration runs integration-setup.sh.
	mk := readAll(t, filepath.Join(moduleRoot(t), "Makefile"))
	for _, l := range steps {
		for _, m := range makeRef.FindAllStringSubmatch(l, -1) {
			steps = append(steps, makeRecipe(mk, m[1], map[string]bool{})...)
		}
	}
	all := strings.Join(steps, "\n")

	run := readAll(t, filepath.Join(moduleRoot(t), ".ci", "run"))
	var cmds []string
	for _, l := range strings.Split(run, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, "echo ") {
			cmds = append(cmds, l)
		}
	}
	targets, scripts := 0, 0
	for _, l := range cmds {
		for _, m := range makeRef.FindAllStringSubmatch(l, -1) {
			targets++
			if !regexp.MustCompile(`(?m)(^|\s)make\s+` + regexp.QuoteMeta(m[1]) + `(\s|$)`).MatchString(all) {
				t.Errorf(".ci/run runs `make %s`, which no job the release needs runs", m[1])
			}
		}
		for _, m := range scriptRef.FindAllStringSubmatch(l, -1) {
			scripts++
			if !strings.Contains(all, m[1]) {
				t.Errorf(".ci/run runs %s, which no job the release needs runs", m[1])
			}
		}
	}
	if targets < 5 || scripts < 3 {
		t.Fatalf(".ci/run read as %d make targets and %d scripts: %q", targets, scripts, cmds)
	}

	for name := range needed {
		j := jobs[name]
		script := strings.Join(j.Script, "\n")
		real := strings.Contains(script, "-tags integration") || strings.Contains(script, "test-integration") ||
			strings.Contains(script, "integration-setup") || strings.Contains(script, "test-rules")
		if !real {
			continue
		}
		if !contains(j.Tags, realPartsTag) {
			t.Errorf("job %s needs the real parts but does not ask for the %s runner: tags %q", name, realPartsTag, j.Tags)
		}
		if j.Variables["CI"] != "true" && !strings.Contains(script, "CI=true") {
			t.Errorf("job %s does not set CI=true: a missing part would skip instead of failing", name)
		}
	}
	// No test skips in CI: the integration run goes through make test-integration, whose go test
	// -json stream noskip reads, failing the run on a skipped test.
	for name := range needed {
		if script := strings.Join(jobs[name].Script, "\n"); strings.Contains(script, "-tags integration") {
			t.Errorf("job %s runs go test -tags integration itself: run make test-integration, which fails on a skipped test", name)
		}
	}
	if r := strings.Join(makeRecipe(mk, "test-integration", map[string]bool{}), "\n"); !regexp.MustCompile(`test -json .*-tags integration .*\| bin/noskip`).MatchString(r) {
		t.Errorf("make test-integration does not pipe go test -json through bin/noskip:\n%s", r)
	}
	if fuzz := strings.Join(jobs["test:fuzz"].Script, "\n"); !regexp.MustCompile(`make fuzz FUZZTIME=[0-9]+x`).MatchString(fuzz) {
		t.Errorf("test:fuzz runs %q, want make fuzz with a count (a duration can end in the baseline run on a loaded runner)", fuzz)
	}
}

// makeRecipe is target's recipe in the Makefile mk, its prerequisites' first (seen: done).
func makeRecipe(mk, target string, seen map[string]bool) []string {
	if seen[target] {
		return nil
	}
	seen[target] = true
	var out []string
	lines := strings.Split(mk, "\n")
	for i, l := range lines {
		rest, ok := strings.CutPrefix(l, target+":")
		if !ok || strings.HasPrefix(rest, "=") {
			continue
		}
		prereqs, _, _ := strings.Cut(rest, "##")
		for _, p := range strings.Fields(prereqs) {
			out = append(out, makeRecipe(mk, p, seen)...)
		}
		for _, r := range lines[i+1:] {
			if !strings.HasPrefix(r, "\t") {
				break
			}
			out = append(out, strings.TrimSpace(r))
		}
	}
	return out
}

var (
	scriptRef = regexp.MustCompile(`(?:^|\s)((?:scripts|packaging)/[A-Za-z0-9_./-]+)`)
	makeRef   = regexp.MustCompile(`(?:^|\s)make\s+([a-z][a-z0-9-]*)`)
	goPkgRef  = regexp.MustCompile(`\./(packaging|cmd|internal)(/[A-Za-z0-9_/]*)?(/\.\.\.)?`)
)

// TestGitLabCIReferencesExist: every script, make target and package a job names exists, so a
// pipeline that cannot run here is at least not broken by a rename.
func TestGitLabCIReferencesExist(t *testing.T) {
	root := moduleRoot(t)
	_, jobs := loadCI(t)
	mk := readAll(t, filepath.Join(root, "packaging", "packaging.mk"))
	if b, err := os.ReadFile(filepath.Join(root, "Makefile")); err == nil {
		mk += string(b)
	}
	for name, j := range jobs {
		for _, line := range j.Script {
			for _, m := range scriptRef.FindAllStringSubmatch(line, -1) {
				p := filepath.Join(root, m[1])
				st, err := os.Stat(p)
				if err != nil {
					t.Errorf("job %s: %q names %s, which does not exist", name, line, m[1])
					continue
				}
				direct := strings.HasPrefix(strings.TrimSpace(line), m[1])
				if direct && st.Mode().Perm()&0o111 == 0 {
					t.Errorf("job %s runs %s directly but it is not executable", name, m[1])
				}
			}
			for _, m := range makeRef.FindAllStringSubmatch(line, -1) {
				if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(m[1]) + `:`).MatchString(mk) {
					t.Errorf("job %s: make target %s is defined nowhere", name, m[1])
				}
			}
			for _, m := range goPkgRef.FindAllStringSubmatch(line, -1) {
				dir := filepath.Join(root, m[1], strings.TrimPrefix(m[2], "/"))
				if _, err := os.Stat(dir); err != nil {
					t.Errorf("job %s: %q names %s, which does not exist", name, line, m[0])
				}
			}
		}
	}
}

// TestInstallScriptMarkers: make deb stamps the version into install.sh through one exact line,
// and the script must switch tracing off before it can touch the token.
func TestInstallScriptMarkers(t *testing.T) {
	root := moduleRoot(t)
	sh := readAll(t, filepath.Join(root, "packaging", "install.sh"))
	if n := strings.Count(sh, "\nDEFAULT_VERSION=\"@VERSION@\"\n"); n != 1 {
		t.Errorf("install.sh has %d DEFAULT_VERSION marker lines, want 1", n)
	}
	lines := strings.Split(sh, "\n")
	firstCode := ""
	for _, l := range lines[1:] {
		if strings.TrimSpace(l) != "" && !strings.HasPrefix(l, "#") {
			firstCode = l
			break
		}
	}
	if firstCode != "set +x" {
		t.Errorf("the first command of install.sh is %q, want `set +x`", firstCode)
	}
	if regexp.MustCompile(`(?m)^\s*set\s+-[a-z]*x`).MatchString(sh) {
		t.Error("install.sh switches xtrace on")
	}
	mk := readAll(t, filepath.Join(root, "packaging", "packaging.mk"))
	if !strings.Contains(mk, `s/^DEFAULT_VERSION="@VERSION@"$$/`) {
		t.Error("packaging.mk no longer stamps install.sh's DEFAULT_VERSION line")
	}
}

func readAll(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func contains(list []string, want string) bool {
	for _, s := range list {
		if s == want {
			return true
		}
	}
	return false
}
