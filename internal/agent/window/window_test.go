package window

import (
	"strings"
	"testing"
	"time"
)

func TestParseRefusesEveryBadValue(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"", "empty"},
		{"   ", "empty"},
		{"Mon-Fri", "want days and times"},
		{"Mon-Fri 02:00-05:00 extra", "want days and times"},
		{"Mo 02:00-05:00", `"Mo" is not a day`},
		{"Monday 02:00-05:00", `"Monday" is not a day`},
		{"Mon-Fry 02:00-05:00", `"Fry" is not a day`},
		{",Mon 02:00-05:00", `"" is not a day`},
		{"Mon,Mon 02:00-05:00", "Mon is given twice"},
		{"Mon-Fri,Wed 02:00-05:00", "Wed is given twice"},
		{"Mon 25:00-26:00", "hour 25 is past 23"},
		{"Mon 02:00-25:00", "hour 25 is past 23"},
		{"Mon 24:00-24:00", "hour 24 is past 23"},
		{"Mon 02:60-05:00", "minute 60 is past 59"},
		{"Mon 2:00-05:00", `"2:00" is not a time`},
		{"Mon 02:00", "want a time range"},
		{"Mon 02:00-", `"" is not a time`},
		{"Mon +2:00-05:00", "is not a time"},
		{"Mon 0x:00-05:00", "is not a time"},
		{"Mon 05:00-02:00", "the end must come after the start"},
		{"Mon 05:00-05:00", "the end must come after the start"},
		{"Mon 22:00-02:00", "the end must come after the start"},
		{"Mon 02:00-24:01", "hour 24 is past 23"},
		{"Mon\x00 02:00-05:00", "control character"},
		{"Mon 02:00-05:00\n", "control character"},
		{"Mon \xff02:00-05:00", "invalid UTF-8"},
		{strings.Repeat("Mon,", 40) + " 02:00-05:00", "longer than"},
	} {
		if _, err := Parse(tc.spec); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", tc.spec, err, tc.want)
		}
	}
}

func TestParseReadsDaysAndTimes(t *testing.T) {
	for _, tc := range []struct {
		spec       string
		days       string // initials Sun..Sat, '.' for off
		start, end int
	}{
		{"Mon-Fri 02:00-05:00", ".MTWTF.", 120, 300},
		{"Sat,Sun 00:00-24:00", "S.....S", 0, 1440},
		{"fri-mon 23:30-24:00", "SM...FS", 1410, 1440},
		{"Wed\t 00:00-00:01", "...W...", 0, 1},
		{"Sun-Sat 12:00-13:00", "SMTWTFS", 720, 780},
		{"Tue-Tue 12:00-13:00", "..T....", 720, 780},
	} {
		w, err := Parse(tc.spec)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.spec, err)
			continue
		}
		var got strings.Builder
		for d, on := range w.Days {
			if on {
				got.WriteByte("SMTWTFS"[d])
			} else {
				got.WriteByte('.')
			}
		}
		if got.String() != tc.days || w.Start != tc.start || w.End != tc.end {
			t.Errorf("Parse(%q) = %s %d-%d, want %s %d-%d", tc.spec, got.String(), w.Start, w.End, tc.days, tc.start, tc.end)
		}
	}
}

func TestNewScheduleNamesTheEntryAndZone(t *testing.T) {
	_, err := NewSchedule([]string{"Mon 02:00-05:00", "Tue 25:00-26:00"}, "UTC")
	if e, ok := err.(*Error); !ok || e.Index != 1 || !strings.HasPrefix(err.Error(), "entry 2: ") {
		t.Errorf("bad second entry: %v", err)
	}
	for _, zone := range []string{"Mars/Olympus", "Local", "Europe/Berlin ", "../../etc/passwd", strings.Repeat("A", 65)} {
		_, err := NewSchedule([]string{"Mon 02:00-05:00"}, zone)
		if e, ok := err.(*Error); !ok || e.Index != -1 || !strings.HasPrefix(err.Error(), "zone: ") {
			t.Errorf("zone %q: %v", zone, err)
		}
	}
	if _, err := NewSchedule(make([]string, MaxWindows+1), "UTC"); err == nil {
		t.Error("too many windows accepted")
	}
	s, err := NewSchedule(nil, "")
	if err != nil || !s.Empty() || s.Zone != "UTC" || !s.Open(time.Now()) {
		t.Errorf("no windows: %+v, %v; want an empty schedule, always open", s, err)
	}
}

func mustSchedule(t *testing.T, zone string, specs ...string) *Schedule {
	t.Helper()
	s, err := NewSchedule(specs, zone)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func at(t *testing.T, zone, wall string) time.Time {
	t.Helper()
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	v, err := time.ParseInLocation("2006-01-02 15:04:05", wall, loc)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// A fake clock walked across the window's edges: open exactly from the start, closed exactly at
// the end, and Next from anywhere outside names the next start.
func TestOpenAndNextAcrossEdges(t *testing.T) {
	s := mustSchedule(t, "Europe/Berlin", "Mon-Fri 02:00-05:00", "Sat,Sun 00:00-24:00")
	for _, tc := range []struct {
		now, next string // next "" = open now
	}{
		{"2026-12-02 01:59:59", "2026-12-02 02:00:00"}, // Wednesday, one second early
		{"2026-12-02 02:00:00", ""},
		{"2026-12-02 04:59:59", ""},
		{"2026-12-02 05:00:00", "2026-12-03 02:00:00"},
		{"2026-12-04 05:00:00", "2026-12-05 00:00:00"}, // Friday after its window: Saturday midnight
		{"2026-12-05 13:00:00", ""},
		{"2026-12-06 23:59:59", ""}, // Sunday's last second
		{"2026-12-07 00:00:00", "2026-12-07 02:00:00"},
		{"2026-12-31 23:00:00", "2027-01-01 02:00:00"}, // Thursday to Friday over the year's end
	} {
		now := at(t, "Europe/Berlin", tc.now)
		if open := s.Open(now); open != (tc.next == "") {
			t.Errorf("Open(%s) = %v", tc.now, open)
		}
		want := now
		if tc.next != "" {
			want = at(t, "Europe/Berlin", tc.next)
		}
		if got, ok := s.Next(now); !ok || !got.Equal(want) {
			t.Errorf("Next(%s) = %s %v, want %s", tc.now, got.In(now.Location()), ok, want)
		}
	}
}

// Europe/Berlin springs forward on 2026-03-29 (02:00 CET → 03:00 CEST) and falls back on
// 2026-10-25 (03:00 CEST → 02:00 CET). Windows are wall-clock times.
func TestNextAcrossDST(t *testing.T) {
	berlin, _ := time.LoadLocation("Europe/Berlin")
	utc := func(s string) time.Time {
		v, err := time.Parse(time.RFC3339, s)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, tc := range []struct {
		name  string
		specs []string
		now   string // UTC
		want  string // UTC
	}{
		// The skipped hour: a window starting at 02:00 opens when the clock jumps to 03:00 CEST.
		{"spring: start in the gap", []string{"Sun 02:00-05:00"}, "2026-03-29T00:30:00Z", "2026-03-29T01:00:00Z"},
		// A window wholly in the skipped hour does not open that day: a week later.
		{"spring: window in the gap", []string{"Sun 02:00-02:30"}, "2026-03-29T00:30:00Z", "2026-04-05T00:00:00Z"},
		// After the jump an ordinary window counts in CEST (UTC+2).
		{"spring: after", []string{"Sun 04:00-05:00"}, "2026-03-29T00:30:00Z", "2026-03-29T02:00:00Z"},
		// The day before, CET (UTC+1).
		{"spring: before", []string{"Sat 02:00-05:00"}, "2026-03-27T23:00:00Z", "2026-03-28T01:00:00Z"},
		// The repeated hour: 02:30 happens at 00:30Z (CEST) and at 01:30Z (CET).
		{"autumn: first pass", []string{"Sun 02:30-02:45"}, "2026-10-25T00:00:00Z", "2026-10-25T00:30:00Z"},
		{"autumn: second pass", []string{"Sun 02:30-02:45"}, "2026-10-25T00:50:00Z", "2026-10-25T01:30:00Z"},
		{"autumn: after", []string{"Sun 03:00-04:00"}, "2026-10-25T00:50:00Z", "2026-10-25T02:00:00Z"},
		{"autumn: next day", []string{"Mon 02:00-03:00"}, "2026-10-25T12:00:00Z", "2026-10-26T01:00:00Z"},
	} {
		s := mustSchedule(t, "Europe/Berlin", tc.specs...)
		now, want := utc(tc.now), utc(tc.want)
		got, ok := s.Next(now)
		if !ok || !got.Equal(want) {
			t.Errorf("%s: Next(%s) = %s (%s), want %s (%s)", tc.name, tc.now, got.UTC().Format(time.RFC3339), got.In(berlin), want.Format(time.RFC3339), want.In(berlin))
		}
		if !s.Open(want) || s.Open(want.Add(-time.Second)) {
			t.Errorf("%s: %s is not the instant the window opens", tc.name, want)
		}
	}
	// Inside the repeated hour the window is open on both passes, and closed between them.
	s := mustSchedule(t, "Europe/Berlin", "Sun 02:00-03:00")
	for at, open := range map[string]bool{"2026-10-25T00:10:00Z": true, "2026-10-25T01:10:00Z": true, "2026-10-25T02:10:00Z": false} {
		if s.Open(utc(at)) != open {
			t.Errorf("Open(%s) = %v, want %v", at, !open, open)
		}
	}
}

// Lord Howe moves its clock by 30 minutes; windows still follow the wall.
func TestNextHalfHourDST(t *testing.T) {
	s := mustSchedule(t, "Australia/Lord_Howe", "Sun 02:00-02:20")
	// 2026-10-04 02:00 → 02:30 (+10:30 → +11): the window is wholly skipped that Sunday.
	now, _ := time.Parse(time.RFC3339, "2026-10-03T15:00:00Z")
	got, ok := s.Next(now)
	want, _ := time.Parse(time.RFC3339, "2026-10-10T15:00:00Z") // 02:00 +11 a week later
	if !ok || !got.Equal(want) {
		t.Errorf("Next = %s, want %s", got.UTC(), want)
	}
}

func TestZonesWithoutSystemTzdata(t *testing.T) {
	// time/tzdata is linked in: ZONEINFO pointing nowhere must not lose the zone.
	t.Setenv("ZONEINFO", t.TempDir())
	if _, err := LoadZone("America/New_York"); err != nil {
		t.Fatal(err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"Mon-Fri 02:00-05:00", "Sat,Sun 00:00-24:00", "fri-mon 23:30-24:00", "", "Mon 25:00-26:00", "Mon,Mon 0:0-1:1", "Sun 02:00-02:30"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		w, err := Parse(spec)
		if err != nil {
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
			return
		}
		if !(0 <= w.Start && w.Start < w.End && w.End <= 1440) {
			t.Fatalf("Parse(%q) = %d-%d", spec, w.Start, w.End)
		}
		any := false
		for _, d := range w.Days {
			any = any || d
		}
		if !any {
			t.Fatalf("Parse(%q) has no day", spec)
		}
		// Whatever parses opens within a week and a day, in a zone with DST.
		s := &Schedule{Windows: []Window{w}, Specs: []string{spec}, Zone: "Europe/Berlin", loc: mustLoc(t, "Europe/Berlin")}
		from := time.Date(2026, 3, 28, 22, 17, 0, 0, time.UTC)
		next, ok := s.Next(from)
		if !ok || next.Before(from) || next.Sub(from) > 15*24*time.Hour || !s.Open(next) {
			t.Fatalf("Parse(%q): Next(%s) = %s %v", spec, from, next, ok)
		}
	})
}

func mustLoc(t *testing.T, name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

// BenchmarkNext is a deferred tick's cost of finding the next window (Berlin, DST in view).
func BenchmarkNext(b *testing.B) {
	s, err := NewSchedule([]string{"Mon-Fri 02:00-05:00", "Sat,Sun 00:00-24:00"}, "Europe/Berlin")
	if err != nil {
		b.Fatal(err)
	}
	from := time.Date(2026, 3, 27, 9, 0, 0, 0, time.UTC) // Friday before the spring jump
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := s.Next(from); !ok {
			b.Fatal("no window")
		}
	}
}

// BenchmarkOpen is what every apply and retire pays to ask whether a window is open.
func BenchmarkOpen(b *testing.B) {
	s, err := NewSchedule([]string{"Mon-Fri 02:00-05:00", "Sat,Sun 00:00-24:00"}, "Europe/Berlin")
	if err != nil {
		b.Fatal(err)
	}
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	b.ReportAllocs()
	for b.Loop() {
		s.Open(at)
	}
}
