// Package gitbuild builds a command of this module as it was at an earlier commit, for the
// benchmarks that measure the tree before a change side by side with the tree after it, in one
// run on one loaded machine.
package gitbuild

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// Before is the commit the cost benchmarks (issue 24) measure against: main before the issue's
// work was merged (issue 22's drift check included). MONKY_BENCH_BEFORE names another.
const Before = "ad3e423"

// Wave1 is the end of the first wave of work (session 2's tree, before the compose gate and the
// metrics): the process floor the agent is measured against.
const Wave1 = "d906abc"

// Rev is rev, or the commit MONKY_BENCH_BEFORE names when rev is Before.
func Rev(rev string) string {
	if v := os.Getenv("MONKY_BENCH_BEFORE"); v != "" && rev == Before {
		return v
	}
	return rev
}

// Build writes the package pkg (e.g. ./cmd/deployd) of this module at rev to out, built as
// `make build` builds (static, trimmed, stripped). It fails the benchmark when the history is
// missing (a shallow clone): a before-and-after figure without its before is no figure.
func Build(tb testing.TB, rev, pkg, out string) {
	tb.Helper()
	root, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		tb.Fatalf("gitbuild: not in a git work tree: %v", err)
	}
	src := tb.TempDir()
	archive := exec.Command("git", "-C", strings.TrimSpace(string(root)), "archive", "--format=tar", rev)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	untar.Stdin = pipe
	var archErr strings.Builder
	archive.Stderr = &archErr
	if err := untar.Start(); err != nil {
		tb.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		tb.Fatalf("gitbuild: git archive %s (a shallow clone lacks it; git fetch --unshallow): %v\n%s", rev, err, archErr.String())
	}
	if err := untar.Wait(); err != nil {
		tb.Fatalf("gitbuild: untar %s: %v", rev, err)
	}
	build(tb, src, rev, pkg, out)
}

// BuildTree writes the package pkg of this work tree, as it is now (uncommitted changes
// included), to out, built as Build builds an earlier commit: a before-and-after figure then
// compares two binaries of one kind, not a stripped build with a test binary that links the
// fakes and the test framework besides (7 MiB more resident, for the exporter).
func BuildTree(tb testing.TB, pkg, out string) {
	tb.Helper()
	root, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	if err != nil {
		tb.Fatalf("gitbuild: the module's directory: %v", err)
	}
	build(tb, strings.TrimSpace(string(root)), "the work tree", pkg, out)
}

func build(tb testing.TB, dir, rev, pkg, out string) {
	tb.Helper()
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("gitbuild: go build %s at %s: %v\n%s", pkg, rev, err, b)
	}
	if _, err := os.Stat(out); err != nil {
		tb.Fatalf("gitbuild: %s at %s: %v", pkg, rev, err)
	}
}
