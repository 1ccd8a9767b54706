// Package debchangelog makes the Debian changelog of the packages from docs/CHANGELOG.md, the
// one changelog the project writes: every release there becomes an entry (newest first), its
// `###` themes the bullets and their bold leads the sub-bullets; a Python-era release's
// paragraph is its bullet. An entry's date is the release's date; the heading of a release not
// yet made (`## 0.3.0 — unreleased`) takes the build's date, SOURCE_DATE_EPOCH, so the same tree
// builds the same file.
package debchangelog

import (
	"bufio"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Release is one release of docs/CHANGELOG.md.
type Release struct {
	Version string
	// Date is the release's date; zero for an unreleased heading.
	Date time.Time
	// Items are the bullets: a theme with its sub-items, or a paragraph.
	Items []Item
	// Line is the heading's line in the file.
	Line int
}

// Item is one bullet and its sub-bullets.
type Item struct {
	Text string
	Subs []string
}

// Error is a CHANGELOG.md the parser refuses, with the line.
type Error struct {
	Line int
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("CHANGELOG.md line %d: %s", e.Line, e.Msg) }

var (
	// ## 0.2.0 — the Go agent (2026-12-02)    ## 0.3.0 — unreleased
	releaseHeading = regexp.MustCompile(`^## (\d+\.\d+\.\d+(?:-[0-9A-Za-z.]+)?) — (.+)$`)
	// ### 0.1.9 — 2026-09-09 (under "## Earlier releases")
	oldHeading = regexp.MustCompile(`^### (\d+\.\d+\.\d+) — (\d{4}-\d{2}-\d{2})$`)
	titleDate  = regexp.MustCompile(`\((\d{4}-\d{2}-\d{2})\)$`)
	boldLead   = regexp.MustCompile(`^- \*\*(.+?)\*\*`)
)

// maxSize bounds what is read: the file is tens of kilobytes.
const maxSize = 4 << 20

// Parse reads the releases of a CHANGELOG.md, newest first as written. It refuses a file
// without a release, a heading whose date is not a date, a release given twice, and releases
// not in descending order.
func Parse(data []byte) ([]Release, error) {
	if len(data) > maxSize {
		return nil, &Error{Line: 0, Msg: fmt.Sprintf("larger than %d bytes", maxSize)}
	}
	var out []Release
	var cur *Release
	var theme *Item
	var para []string
	flush := func() {
		if cur != nil && len(para) > 0 {
			cur.Items = append(cur.Items, Item{Text: strings.Join(para, " ")})
		}
		para = nil
	}
	sc := bufio.NewScanner(strings.NewReader(string(data)))
	sc.Buffer(make([]byte, 64*1024), maxSize)
	n := 0
	inOld := false
	for sc.Scan() {
		n++
		line := strings.TrimRight(sc.Text(), " \t\r")
		switch {
		case strings.HasPrefix(line, "## "):
			flush()
			theme = nil
			inOld = false
			cur = nil
			m := releaseHeading.FindStringSubmatch(line)
			if m == nil {
				// A heading that is no release ("## Earlier releases (Python)") holds ### releases.
				inOld = strings.Contains(strings.ToLower(line), "releases")
				continue
			}
			r := Release{Version: m[1], Line: n}
			rest := m[2]
			if rest != "unreleased" {
				dm := titleDate.FindStringSubmatch(rest)
				if dm == nil {
					return nil, &Error{Line: n, Msg: fmt.Sprintf("release heading %q has neither a date in parentheses nor \"unreleased\"", line)}
				}
				d, err := time.Parse(time.DateOnly, dm[1])
				if err != nil {
					return nil, &Error{Line: n, Msg: fmt.Sprintf("date %q: %v", dm[1], err)}
				}
				r.Date = d
				if title := strings.TrimSpace(strings.TrimSuffix(rest, dm[0])); title != "" {
					r.Items = append(r.Items, Item{Text: sentence(capitalised(plain(title)))})
				}
			}
			out = append(out, r)
			cur = &out[len(out)-1]
		case strings.HasPrefix(line, "### "):
			flush()
			theme = nil
			if inOld {
				m := oldHeading.FindStringSubmatch(line)
				if m == nil {
					return nil, &Error{Line: n, Msg: fmt.Sprintf("heading %q under an earlier-releases heading is not \"### X.Y.Z — YYYY-MM-DD\"", line)}
				}
				d, err := time.Parse(time.DateOnly, m[2])
				if err != nil {
					return nil, &Error{Line: n, Msg: fmt.Sprintf("date %q: %v", m[2], err)}
				}
				out = append(out, Release{Version: m[1], Date: d, Line: n})
				cur = &out[len(out)-1]
				continue
			}
			if cur == nil {
				continue
			}
			cur.Items = append(cur.Items, Item{Text: sentence(plain(strings.TrimPrefix(line, "### ")))})
			theme = &cur.Items[len(cur.Items)-1]
		case cur == nil:
		case theme != nil:
			if m := boldLead.FindStringSubmatch(line); m != nil {
				theme.Subs = append(theme.Subs, sentence(plain(m[1])))
			}
		case cur.Date.IsZero() || !inOld:
			// Text between a release heading and its first theme is an introduction: not a bullet.
		case line == "":
			flush()
		default:
			para = append(para, plain(line))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, &Error{Line: n, Msg: err.Error()}
	}
	flush()
	if len(out) == 0 {
		return nil, &Error{Line: n, Msg: "no release heading (\"## X.Y.Z — title (YYYY-MM-DD)\" or \"## X.Y.Z — unreleased\")"}
	}
	seen := map[string]int{}
	for i, r := range out {
		if l, ok := seen[r.Version]; ok {
			return nil, &Error{Line: r.Line, Msg: fmt.Sprintf("release %s is given twice (first on line %d)", r.Version, l)}
		}
		seen[r.Version] = r.Line
		if i > 0 && compare(r.Version, out[i-1].Version) >= 0 {
			return nil, &Error{Line: r.Line, Msg: fmt.Sprintf("release %s comes after %s: newest first", r.Version, out[i-1].Version)}
		}
		if i > 0 && r.Date.IsZero() {
			return nil, &Error{Line: r.Line, Msg: fmt.Sprintf("release %s is unreleased but not the newest", r.Version)}
		}
	}
	return out, nil
}

// compare orders MAJOR.MINOR.PATCH[-PRE] as semver does (a pre-release before its release).
func compare(a, b string) int {
	ac, ap, _ := strings.Cut(a, "-")
	bc, bp, _ := strings.Cut(b, "-")
	as, bs := strings.Split(ac, "."), strings.Split(bc, ".")
	for i := range 3 {
		x, _ := strconv.Atoi(as[i])
		y, _ := strconv.Atoi(bs[i])
		if x != y {
			if x < y {
				return -1
			}
			return 1
		}
	}
	switch {
	case ap == bp:
		return 0
	case ap == "":
		return 1
	case bp == "":
		return -1
	}
	return strings.Compare(ap, bp)
}

// capitalised is a release title as a bullet: "the Go agent" → "The Go agent".
func capitalised(s string) string {
	if s == "" || s[0] < 'a' || s[0] > 'z' {
		return s
	}
	return string(s[0]-('a'-'A')) + s[1:]
}

var (
	mdLink = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	spaces = regexp.MustCompile(`\s+`)
)

// plain is markdown inline text as plain text: links keep their words, code and emphasis marks go.
func plain(s string) string {
	s = mdLink.ReplaceAllString(s, "$1")
	s = strings.NewReplacer("**", "", "`", "", "__", "").Replace(s)
	return strings.TrimSpace(spaces.ReplaceAllString(s, " "))
}

// sentence ends a lead with a full stop instead of the colon or comma that led into its
// paragraph. Its first letter stays as written: a lead may start with a command's name.
func sentence(s string) string {
	s = strings.TrimRight(strings.TrimSpace(s), ":,;")
	if s == "" {
		return s
	}
	if !strings.HasSuffix(s, ".") && !strings.HasSuffix(s, "!") && !strings.HasSuffix(s, "?") {
		s += "."
	}
	return s
}

// Options say what the entries are headed and signed with.
type Options struct {
	// Source is the source package's name, the first word of every entry.
	Source string
	// Version is the newest entry's version as the package carries it (nfpm's Debian form, e.g.
	// 0.3.0 or 0.3.0~rc1); older entries keep their release's version.
	Version string
	// Maintainer signs every entry: "Name <address>".
	Maintainer string
	// Built dates an unreleased entry (SOURCE_DATE_EPOCH of the build).
	Built time.Time
}

// Render writes the Debian changelog (uncompressed) of releases.
func Render(releases []Release, o Options) ([]byte, error) {
	if o.Source == "" || o.Version == "" || o.Maintainer == "" || o.Built.IsZero() {
		return nil, errors.New("debchangelog: Source, Version, Maintainer and Built are required")
	}
	if len(releases) == 0 {
		return nil, errors.New("debchangelog: no release")
	}
	var b strings.Builder
	for i, r := range releases {
		v := r.Version
		if i == 0 {
			v = o.Version
		}
		date := r.Date
		if date.IsZero() {
			date = o.Built
		}
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "%s (%s) unstable; urgency=medium\n\n", o.Source, v)
		items := r.Items
		if len(items) == 0 {
			items = []Item{{Text: "Release " + r.Version + "."}}
		}
		for _, it := range items {
			b.WriteString(fold("  * ", "    ", it.Text))
			for _, s := range it.Subs {
				b.WriteString(fold("    - ", "      ", s))
			}
		}
		// Debian's date format (RFC 5322), in UTC: " -- Name <address>  Thu, 03 Dec 2026 19:35:05 +0000".
		fmt.Fprintf(&b, "\n -- %s  %s\n", o.Maintainer, date.UTC().Format("Mon, 02 Jan 2006 15:04:05 -0700"))
	}
	return []byte(b.String()), nil
}

// width is the longest changelog line (lintian: debian-changelog-line-too-long beyond 80).
const width = 79

// fold writes text after first, continuing at indent, every line at most width columns.
func fold(first, indent, text string) string {
	var b strings.Builder
	b.WriteString(first)
	col := len([]rune(first))
	start := true
	for _, w := range strings.Fields(text) {
		n := len([]rune(w))
		if !start && col+1+n > width {
			b.WriteString("\n" + indent)
			col = len(indent)
			start = true
		}
		if !start {
			b.WriteString(" ")
			col++
		}
		b.WriteString(w)
		col += n
		start = false
	}
	b.WriteString("\n")
	return b.String()
}
