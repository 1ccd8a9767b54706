package debchangelog

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const sample = `# Changelog

## 0.3.0 — unreleased

Intro text that is no bullet.

### Debian-grade packaging

- **Two packages from one build.** The agent and fleetctl ship apart.
- **` + "`fleetctl`" + ` man pages**, generated: from the [cobra](https://cobra.dev) trees.
  A continuation line that is no lead.

### Tests that can fail

## 0.2.0 — the Go agent (2026-12-02)

### New

- **Alerts without anyone running a command:** they page.

## Earlier releases (Python)

### 0.1.9 — 2026-09-09
Upgrading stopped being able to switch the agent off: the package's ` + "`prerm`" + ` returns at once
for every upgrade form.

### 0.1.8 — 2026-09-09
Three fixes.
`

var built = time.Date(2026, 12, 3, 19, 35, 5, 0, time.UTC)

func opts() Options {
	return Options{Source: "monky-deployd", Version: "0.3.0", Maintainer: "Tikali Monky team <monky@tikali.ai>", Built: built}
}

func TestRender(t *testing.T) {
	rs, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	out, err := Render(rs, opts())
	if err != nil {
		t.Fatal(err)
	}
	want := `monky-deployd (0.3.0) unstable; urgency=medium

  * Debian-grade packaging.
    - Two packages from one build.
    - fleetctl man pages.
  * Tests that can fail.

 -- Tikali Monky team <monky@tikali.ai>  Thu, 03 Dec 2026 19:35:05 +0000

monky-deployd (0.2.0) unstable; urgency=medium

  * The Go agent.
  * New.
    - Alerts without anyone running a command.

 -- Tikali Monky team <monky@tikali.ai>  Wed, 02 Dec 2026 00:00:00 +0000

monky-deployd (0.1.9) unstable; urgency=medium

  * Upgrading stopped being able to switch the agent off: the package's prerm
    returns at once for every upgrade form.

 -- Tikali Monky team <monky@tikali.ai>  Wed, 09 Sep 2026 00:00:00 +0000

monky-deployd (0.1.8) unstable; urgency=medium

  * Three fixes.

 -- Tikali Monky team <monky@tikali.ai>  Wed, 09 Sep 2026 00:00:00 +0000
`
	if string(out) != want {
		t.Errorf("Render:\n%s\nwant:\n%s", out, want)
	}
	// The newest entry carries the package's own version (a pre-release build's Debian form).
	o := opts()
	o.Version = "0.3.0~rc1"
	out, _ = Render(rs, o)
	if !strings.HasPrefix(string(out), "monky-deployd (0.3.0~rc1) unstable") {
		t.Errorf("the newest entry does not carry the package's version:\n%s", out)
	}
}

func TestParseRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		line       int
		want       string
	}{
		{"no release", "# Changelog\n\nnothing\n", 3, "no release heading"},
		{"no date", "## 0.2.0 — the Go agent\n", 1, "neither a date"},
		{"bad date", "## 0.2.0 — x (2026-13-40)\n", 1, "date"},
		{"twice", "## 0.2.0 — x (2026-12-02)\n## 0.2.0 — y (2026-12-01)\n", 2, "given twice"},
		{"order", "## 0.1.0 — x (2026-12-02)\n## 0.2.0 — y (2026-12-03)\n", 2, "newest first"},
		{"unreleased below a release", "## 0.3.0 — x (2026-12-02)\n## 0.2.0 — unreleased\n", 2, "unreleased but not the newest"},
		{"old heading malformed", "## 0.2.0 — x (2026-12-02)\n## Earlier releases\n### 0.1.9 — soon\n", 3, "is not \"### X.Y.Z — YYYY-MM-DD\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(tc.text))
			var e *Error
			if !errors.As(err, &e) || e.Line != tc.line || !strings.Contains(e.Msg, tc.want) {
				t.Errorf("Parse: %v, want line %d with %q", err, tc.line, tc.want)
			}
		})
	}
}

func TestRenderRequires(t *testing.T) {
	rs, _ := Parse([]byte(sample))
	for _, o := range []Options{{Version: "1", Maintainer: "m", Built: built}, {Source: "s", Maintainer: "m", Built: built},
		{Source: "s", Version: "1", Built: built}, {Source: "s", Version: "1", Maintainer: "m"}} {
		if _, err := Render(rs, o); err == nil {
			t.Errorf("Render(%+v) did not refuse", o)
		}
	}
	if _, err := Render(nil, opts()); err == nil {
		t.Error("Render of no release did not refuse")
	}
}

// TestTheProjectsChangelog: docs/CHANGELOG.md parses, its newest release is VERSION (what the
// package is built as), and every line of the Debian changelog fits lintian's 80 columns.
func TestTheProjectsChangelog(t *testing.T) {
	root := filepath.Join("..", "..")
	data, err := os.ReadFile(filepath.Join(root, "docs", "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	rs, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	v, err := os.ReadFile(filepath.Join(root, "VERSION"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := rs[0].Version, strings.TrimSpace(string(v)); got != want {
		t.Errorf("the newest release in docs/CHANGELOG.md is %s, VERSION is %s", got, want)
	}
	out, err := Render(rs, opts())
	if err != nil {
		t.Fatal(err)
	}
	for i, l := range strings.Split(string(out), "\n") {
		if n := len([]rune(l)); n > 80 {
			t.Errorf("line %d is %d columns: %q", i+1, n, l)
		}
	}
}

// FuzzParse: any input is releases or an *Error, never a panic; what renders keeps every line
// within 80 columns unless one word is longer, and every entry is signed.
func FuzzParse(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte("## 1.0.0 — unreleased\n### A\n- **b**\n"))
	f.Add([]byte("## Earlier releases\n### 0.1.0 — 2020-01-01\ntext\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		rs, err := Parse(data)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("error of another type: %v", err)
			}
			return
		}
		out, err := Render(rs, opts())
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Count(string(out), "\n -- "); got != len(rs) {
			t.Fatalf("%d signatures for %d releases", got, len(rs))
		}
		for _, l := range strings.Split(string(out), "\n") {
			if len([]rune(l)) > 80 && !strings.HasPrefix(l, " -- ") && len(strings.Fields(l)) > 2 {
				t.Fatalf("line too long: %q", l)
			}
		}
	})
}
