// Package window reads apply windows ("Mon-Fri 02:00-05:00" in an IANA zone) and says whether an
// instant is inside one and when the next one opens, by the wall clock of the zone, DST included.
package window

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	// A box without the tzdata package still knows every zone: the agent must not defer a prod
	// change forever, or apply one in business hours, because /usr/share/zoneinfo is missing.
	_ "time/tzdata"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/clip"
)

// Window is one entry: the weekdays it is open on and the minutes of the day, [Start, End).
type Window struct {
	Days  [7]bool // indexed by time.Weekday
	Start int     // minutes after local midnight, 0..1439
	End   int     // minutes after local midnight, Start+1..1440 (24:00)
}

// Schedule is a list of windows in one zone; a Schedule without windows is always open.
type Schedule struct {
	Windows []Window
	// Specs are the entries as written, for messages.
	Specs []string
	// Zone is the zone's name as written ("UTC" when none was).
	Zone string
	loc  *time.Location
}

// Error is a bad entry or zone; Index is the entry's position (-1 for the zone).
type Error struct {
	Index int
	Msg   string
}

func (e *Error) Error() string {
	if e.Index < 0 {
		return e.Msg
	}
	return fmt.Sprintf("entry %d: %s", e.Index+1, e.Msg)
}

// MaxWindows bounds a schedule: a site's rule is a few lines; a long list is a mistake or an attack.
const MaxWindows = 32

// maxSpec bounds one entry ("Mon,Tue,Wed,Thu,Fri,Sat,Sun 00:00-24:00" is 39 bytes).
const maxSpec = 128

var dayNames = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
}

// Parse reads one entry: `DAYS HH:MM-HH:MM`, DAYS a comma list of Mon..Sun or ranges (Mon-Fri;
// Fri-Mon wraps over the weekend), the times in 00:00..23:59, the end after the start, 24:00
// being the end of the day.
func Parse(spec string) (Window, error) {
	var w Window
	if !utf8.ValidString(spec) || strings.IndexFunc(spec, func(r rune) bool { return unicode.IsControl(r) && r != '\t' }) >= 0 {
		return w, errors.New("contains a control character or invalid UTF-8")
	}
	if len(spec) > maxSpec {
		return w, fmt.Errorf("%q is longer than %d bytes", clip.Head(spec, 40), maxSpec)
	}
	fields := strings.Fields(spec)
	switch len(fields) {
	case 0:
		return w, errors.New(`empty; want days and times like "Mon-Fri 02:00-05:00"`)
	case 2:
	default:
		return w, fmt.Errorf(`%q: want days and times like "Mon-Fri 02:00-05:00"`, spec)
	}
	if err := parseDays(fields[0], &w.Days); err != nil {
		return w, fmt.Errorf("%q: %w", spec, err)
	}
	from, to, ok := strings.Cut(fields[1], "-")
	if !ok {
		return w, fmt.Errorf("%q: want a time range like 02:00-05:00, got %q", spec, fields[1])
	}
	var err error
	if w.Start, err = parseClock(from, false); err != nil {
		return w, fmt.Errorf("%q: start: %w", spec, err)
	}
	if w.End, err = parseClock(to, true); err != nil {
		return w, fmt.Errorf("%q: end: %w", spec, err)
	}
	if w.Start >= w.End {
		return w, fmt.Errorf("%q: the end must come after the start (a window ends the day it starts; 24:00 is midnight at its end)", spec)
	}
	return w, nil
}

func parseDays(s string, days *[7]bool) error {
	for _, part := range strings.Split(s, ",") {
		from, to, isRange := strings.Cut(part, "-")
		a, err := parseDay(from)
		if err != nil {
			return err
		}
		b := a
		if isRange {
			if b, err = parseDay(to); err != nil {
				return err
			}
		}
		for d := a; ; d = (d + 1) % 7 {
			if days[d] {
				return fmt.Errorf("%s is given twice", d.String()[:3])
			}
			days[d] = true
			if d == b {
				break
			}
		}
	}
	return nil
}

func parseDay(s string) (time.Weekday, error) {
	d, ok := dayNames[strings.ToLower(s)]
	if !ok {
		return 0, fmt.Errorf("%q is not a day (Mon, Tue, Wed, Thu, Fri, Sat, Sun)", clip.Head(s, 20))
	}
	return d, nil
}

// parseClock reads HH:MM; 24:00 only as an end.
func parseClock(s string, end bool) (int, error) {
	hh, mm, ok := strings.Cut(s, ":")
	if !ok || len(hh) != 2 || len(mm) != 2 {
		return 0, fmt.Errorf("%q is not a time HH:MM", clip.Head(s, 20))
	}
	h, herr := strconv.Atoi(hh)
	m, merr := strconv.Atoi(mm)
	if herr != nil || merr != nil || hh[0] == '+' || hh[0] == '-' || mm[0] == '+' || mm[0] == '-' {
		return 0, fmt.Errorf("%q is not a time HH:MM", s)
	}
	switch {
	case end && h == 24 && m == 0:
		return 24 * 60, nil
	case h > 23:
		return 0, fmt.Errorf("%q: hour %d is past 23 (24:00 only ends a window)", s, h)
	case m > 59:
		return 0, fmt.Errorf("%q: minute %d is past 59", s, m)
	}
	return h*60 + m, nil
}

// LoadZone is time.LoadLocation for an apply_windows_tz: "" is UTC, "Local" is refused (the box's
// own zone is not the site's rule).
func LoadZone(name string) (*time.Location, error) {
	switch {
	case name == "":
		return time.UTC, nil
	case name == "Local":
		return nil, errors.New(`"Local" depends on the box's setting; name the zone, e.g. Europe/Berlin`)
	case len(name) > 64 || strings.IndexFunc(name, func(r rune) bool { return r <= ' ' || r >= utf8.RuneSelf }) >= 0:
		return nil, fmt.Errorf("%q is not an IANA zone name", clip.Head(name, 40))
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("%q is not an IANA zone name (e.g. Europe/Berlin, UTC)", name)
	}
	return loc, nil
}

// NewSchedule parses every entry and the zone; errors are *Error naming the entry (or zone).
func NewSchedule(specs []string, zone string) (*Schedule, error) {
	if len(specs) > MaxWindows {
		return nil, &Error{Index: -1, Msg: fmt.Sprintf("%d windows, at most %d", len(specs), MaxWindows)}
	}
	loc, err := LoadZone(zone)
	if err != nil {
		return nil, &Error{Index: -1, Msg: "zone: " + err.Error()}
	}
	s := &Schedule{Specs: append([]string(nil), specs...), Zone: zone, loc: loc}
	if zone == "" {
		s.Zone = "UTC"
	}
	for i, spec := range specs {
		w, err := Parse(spec)
		if err != nil {
			return nil, &Error{Index: i, Msg: err.Error()}
		}
		s.Windows = append(s.Windows, w)
	}
	return s, nil
}

// Empty: no window is set, so every instant is inside.
func (s *Schedule) Empty() bool { return s == nil || len(s.Windows) == 0 }

// String is the schedule as the journal shows it: `Mon-Fri 02:00-05:00 (Europe/Berlin)`.
func (s *Schedule) String() string {
	if s.Empty() {
		return "any time"
	}
	return strings.Join(s.Specs, ", ") + " (" + s.Zone + ")"
}

// Open reports whether t is inside a window, by the zone's wall clock at t.
func (s *Schedule) Open(t time.Time) bool {
	if s.Empty() {
		return true
	}
	lt := t.In(s.loc)
	m := lt.Hour()*60 + lt.Minute()
	for _, w := range s.Windows {
		if w.Days[lt.Weekday()] && w.Start <= m && m < w.End {
			return true
		}
	}
	return false
}

// horizonDays bounds Next's search: any valid schedule opens within 8 days, or 9 when its only
// window falls in a DST gap one week; a year is far past both.
const horizonDays = 370

// Next is the first instant at or after t inside a window; false when none opens within a year.
// A window whose start falls in a DST gap opens when the gap ends (if it is still open then);
// one wholly inside the gap does not open that day; one in a repeated hour opens at each pass.
func (s *Schedule) Next(t time.Time) (time.Time, bool) {
	if s.Open(t) {
		return t, true
	}
	t = t.Truncate(time.Second)
	var best time.Time
	consider := func(c time.Time) {
		if c.After(t) && (best.IsZero() || c.Before(best)) && s.Open(c) {
			best = c
		}
	}
	// Zone transitions: where a gap swallows a window's start, the window opens at the gap's end.
	end := t.AddDate(0, 0, horizonDays)
	for x, n := t, 0; n < 4*horizonDays; n++ {
		_, next := x.In(s.loc).ZoneBounds()
		if next.IsZero() || next.After(end) {
			break
		}
		consider(next)
		x = next
		if !best.IsZero() {
			break
		}
	}
	lt := t.In(s.loc)
	y, mo, d := lt.Date()
	for day := 0; day <= horizonDays; day++ {
		date := time.Date(y, mo, d+day, 12, 0, 0, 0, s.loc)
		if !best.IsZero() && date.AddDate(0, 0, -1).After(best) {
			break
		}
		for _, w := range s.Windows {
			if w.Days[date.Weekday()] {
				for _, c := range wallInstants(date, w.Start, s.loc) {
					consider(c)
				}
			}
		}
	}
	return best, !best.IsZero()
}

// wallInstants are the instants at which the zone's clock reads minute of date's day: none in a
// gap, two in a repeated hour, else one.
func wallInstants(date time.Time, minute int, loc *time.Location) []time.Time {
	y, mo, d := date.Date()
	naive := time.Date(y, mo, d, minute/60, minute%60, 0, 0, time.UTC)
	var out []time.Time
	seen := map[int]bool{}
	for _, probe := range []time.Time{date.Add(-36 * time.Hour), date, date.Add(36 * time.Hour)} {
		_, off := probe.In(loc).Zone()
		if seen[off] {
			continue
		}
		seen[off] = true
		c := naive.Add(-time.Duration(off) * time.Second).In(loc)
		cy, cm, cd := c.Date()
		if cy == y && cm == mo && cd == d && c.Hour()*60+c.Minute() == minute {
			out = append(out, c)
		}
	}
	return out
}
