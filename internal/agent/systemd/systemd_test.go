package systemd

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner/runnertest"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

const unit = "monky-deployd.timer"

var showArgs = []string{"show", unit, "--no-pager", "-p", "LoadState,UnitFileState,ActiveState,NextElapseUSecRealtime,NextElapseUSecMonotonic"}

func ptr[T any](v T) *T { return &v }

func show(fileState, active, realtime, monotonic string) string {
	return fmt.Sprintf("UnitFileState=%s\nActiveState=%s\nNextElapseUSecRealtime=%s\nNextElapseUSecMonotonic=%s\n", fileState, active, realtime, monotonic)
}

func TestTimerState(t *testing.T) {
	now := time.Date(2026, 12, 2, 10, 0, 30, 0, time.UTC)
	// The box has been up 1 day; the timer fires 30 s from now on the monotonic clock.
	uptime := 24 * time.Hour
	tests := []struct {
		name      string
		stdout    string
		code      int
		startErr  error
		want      protocol.Timer
		noMonoClk bool
	}{
		{
			name:   "enabled, active, calendar next elapse",
			stdout: show("enabled", "active", "Wed 2026-12-02 10:01:00 UTC", "0"),
			want:   protocol.Timer{Enabled: ptr(true), Active: ptr(true), NextElapse: ptr("2026-12-02T10:01:00Z")},
		},
		{
			name:   "monotonic timer: next elapse converted to wall time",
			stdout: show("enabled", "active", "", "1d 30s"),
			want:   protocol.Timer{Enabled: ptr(true), Active: ptr(true), NextElapse: ptr("2026-12-02T10:01:00Z")},
		},
		{
			name:   "monotonic with fractions",
			stdout: show("enabled", "active", "", "23h 59min 59.500000s"),
			want:   protocol.Timer{Enabled: ptr(true), Active: ptr(true), NextElapse: ptr("2026-12-02T10:00:29Z")},
		},
		{
			name:      "monotonic without a readable clock stays null",
			stdout:    show("enabled", "active", "", "1d 30s"),
			noMonoClk: true,
			want:      protocol.Timer{Enabled: ptr(true), Active: ptr(true)},
		},
		{
			name:   "enabled-runtime counts as enabled",
			stdout: show("enabled-runtime", "active", "n/a", "infinity"),
			want:   protocol.Timer{Enabled: ptr(true), Active: ptr(true)},
		},
		{
			// 0.1.8's prerm ran `disable --now` on upgrade: exactly what tenancy must see.
			name:   "disabled and stopped",
			stdout: show("disabled", "inactive", "", "0"),
			want:   protocol.Timer{Enabled: ptr(false), Active: ptr(false)},
		},
		{
			name:   "static is not enabled",
			stdout: show("static", "active", "", "0"),
			want:   protocol.Timer{Enabled: ptr(false), Active: ptr(true)},
		},
		{
			name:   "masked",
			stdout: show("masked", "inactive", "", "0"),
			want:   protocol.Timer{Enabled: ptr(false), Active: ptr(false)},
		},
		{
			// No unit file state is no observation: unknown, never a guessed false.
			name:   "empty unit file state",
			stdout: show("", "active", "", "0"),
			want:   protocol.Timer{Active: ptr(true)},
		},
		{
			// What systemctl answers for a unit it does not know: every field stays null.
			name:   "unit not installed",
			stdout: "LoadState=not-found\n" + show("", "inactive", "", "0"),
			want:   protocol.Timer{},
		},
		{
			name:   "loaded unit",
			stdout: "LoadState=loaded\n" + show("disabled", "inactive", "", "0"),
			want:   protocol.Timer{Enabled: ptr(false), Active: ptr(false)},
		},
		{
			name:   "a zone other than UTC is not guessed",
			stdout: show("enabled", "active", "Wed 2026-12-02 11:01:00 CET", "0"),
			want:   protocol.Timer{Enabled: ptr(true), Active: ptr(true)},
		},
		{
			name:   "properties missing from the answer stay null",
			stdout: "ActiveState=active\n",
			want:   protocol.Timer{Active: ptr(true)},
		},
		{
			name:   "garbage answer",
			stdout: "Failed to connect to bus\n",
			want:   protocol.Timer{},
		},
		{
			name: "systemctl fails",
			code: 1,
			want: protocol.Timer{},
		},
		{
			name:     "systemctl missing",
			startErr: fmt.Errorf("start systemctl: %w", runner.ErrNotFound),
			want:     protocol.Timer{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := runnertest.New(t)
			e := fake.Expect("systemctl", showArgs)
			if tt.startErr != nil {
				e.Fails(tt.startErr)
			} else {
				e.Returns(tt.stdout, "", tt.code)
			}
			p := Probe{Runner: fake, BootedDir: t.TempDir(), Monotonic: func() (time.Duration, error) { return uptime, nil }}
			if tt.noMonoClk {
				p.Monotonic = func() (time.Duration, error) { return 0, errors.New("no clock") }
			}
			got := p.TimerState(context.Background(), unit, now)
			want := tt.want
			want.Unit = unit
			want.ObservedAt = ptr("2026-12-02T10:00:30Z")
			checkTimer(t, got, &want)
			for _, c := range fake.Calls() {
				if v, _ := c.Getenv("TZ"); v != "UTC" {
					t.Errorf("systemctl ran with TZ=%q, want UTC (timestamps are printed in the local zone)", v)
				}
			}
		})
	}
}

func TestTimerStateWithoutSystemd(t *testing.T) {
	fake := runnertest.New(t) // no expectations: running systemctl at all fails the test
	p := Probe{Runner: fake, BootedDir: filepath.Join(t.TempDir(), "run-systemd-system")}
	got := p.TimerState(context.Background(), unit, time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)))
	checkTimer(t, got, &protocol.Timer{Unit: unit, ObservedAt: ptr("2026-01-02T02:04:05Z")})
	if len(fake.Calls()) != 0 {
		t.Errorf("ran %d command(s) on a box without systemd", len(fake.Calls()))
	}
	// The package-level helper looks at the real /run/systemd/system; whatever the machine, it
	// must name the unit and never invent a field it could not read.
	fake2 := runnertest.New(t)
	fake2.Expect("systemctl", showArgs).AnyTimes().Returns(show("enabled", "active", "Wed 2026-12-02 10:01:00 UTC", "0"), "", 0)
	if got := TimerState(context.Background(), fake2, unit, time.Now()); got.Unit != unit || (got.Enabled == nil) != (len(fake2.Calls()) == 0) {
		t.Errorf("TimerState = %+v after %d call(s)", got, len(fake2.Calls()))
	}
}

func checkTimer(t *testing.T, got, want *protocol.Timer) {
	t.Helper()
	if got == nil {
		t.Fatal("TimerState returned nil")
	}
	if got.Unit != want.Unit {
		t.Errorf("Unit = %q, want %q", got.Unit, want.Unit)
	}
	eqBool := func(name string, g, w *bool) {
		if (g == nil) != (w == nil) || (g != nil && *g != *w) {
			t.Errorf("%s = %v, want %v", name, show2(g), show2(w))
		}
	}
	eqBool("Enabled", got.Enabled, want.Enabled)
	eqBool("Active", got.Active, want.Active)
	for _, f := range []struct {
		name string
		g, w *string
	}{{"NextElapse", got.NextElapse, want.NextElapse}, {"ObservedAt", got.ObservedAt, want.ObservedAt}} {
		if (f.g == nil) != (f.w == nil) || (f.g != nil && *f.g != *f.w) {
			t.Errorf("%s = %v, want %v", f.name, show2(f.g), show2(f.w))
		}
	}
}

func show2[T any](p *T) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

func TestParseTimestamp(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"Wed 2026-12-02 10:01:00 UTC", "2026-12-02T10:01:00Z"},
		{"Wed 2026-12-02 10:01:00.250000 UTC", "2026-12-02T10:01:00Z"},
		{"@1796205660", "2026-12-02T10:01:00Z"},
		{"", ""},
		{"n/a", ""},
		{"infinity", ""},
		{"Wed 2026-12-02 10:01:00 CET", ""},
		{"Wed 2026-13-02 10:01:00 UTC", ""},
		{"@-5", ""},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok := ParseTimestamp(tt.in)
			s := ""
			if ok {
				s = got.UTC().Format(time.RFC3339)
			}
			if s != tt.want {
				t.Errorf("ParseTimestamp(%q) = %q, want %q", tt.in, s, tt.want)
			}
		})
	}
}

func TestParseTimespan(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		ok      bool
		wantErr bool
	}{
		{"1d 2h 3min 4.500000s", 26*time.Hour + 3*time.Minute + 4500*time.Millisecond, true, false},
		{"1y 1month 1w", 31557600*time.Second + 2629800*time.Second + 7*24*time.Hour, true, false},
		{"250ms 10us", 250*time.Millisecond + 10*time.Microsecond, true, false},
		{"0", 0, false, false},
		{"infinity", 0, false, false},
		{"", 0, false, false},
		{"3 days", 0, false, true},
		{"5min3s", 0, false, true},
		{"1.2.3s", 0, false, true},
		{"99999999999999y", 0, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok, err := ParseTimespan(tt.in)
			if (err != nil) != tt.wantErr || ok != tt.ok || got != tt.want {
				t.Errorf("ParseTimespan(%q) = %v, %v, %v; want %v, %v, error %v", tt.in, got, ok, err, tt.want, tt.ok, tt.wantErr)
			}
		})
	}
}

func TestParseShow(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[string]string
		wantErr bool
	}{
		{"values with = and blanks", "A=b=c\nB=\n\nC= x \n", map[string]string{"A": "b=c", "B": "", "C": "x"}, false},
		{"CRLF", "A=1\r\n", map[string]string{"A": "1"}, false},
		{"line without =", "A=1\nnonsense\n", nil, true},
		{"empty key", "=1\n", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseShow([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseShow error = %v, wantErr %v", err, tt.wantErr)
			}
			if len(got) != len(tt.want) {
				t.Errorf("ParseShow = %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("ParseShow[%q] = %q, want %q", k, got[k], v)
				}
			}
		})
	}
}

func TestRealMonotonicClock(t *testing.T) {
	a, err := clockMonotonic()
	if err != nil {
		t.Fatalf("clockMonotonic: %v", err)
	}
	b, err := clockMonotonic()
	if err != nil || b < a || a <= 0 {
		t.Errorf("clockMonotonic went %v then %v (%v)", a, b, err)
	}
}

func FuzzParseShow(f *testing.F) {
	f.Add([]byte(show("enabled", "active", "Wed 2026-12-02 10:01:00 UTC", "1d 2h 3min 4.500000s")))
	f.Add([]byte("=\n"))
	f.Add([]byte("A=B\r\nC"))
	f.Add([]byte("Id=a.timer\nUnitFileState= enabled \r\n\nId=b.timer\nX=a=b\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		props, err := ParseShow(b)
		if err != nil {
			return
		}
		// Each property is the last line naming it, its value trimmed; every line names one.
		last := map[string]string{}
		for _, line := range strings.Split(string(b), "\n") {
			if i := strings.IndexByte(line, '='); i >= 0 {
				last[line[:i]] = strings.TrimSpace(strings.TrimSuffix(line[i+1:], "\r"))
			} else if strings.TrimSpace(line) != "" {
				t.Fatalf("accepted a line without '=': %q", line)
			}
		}
		if len(last) != len(props) {
			t.Fatalf("%d properties from %d named lines: %q", len(props), len(last), b)
		}
		for k, v := range last {
			if got, ok := props[k]; !ok || got != v {
				t.Fatalf("%s = %q (present %v), the output's last line says %q", k, got, ok, v)
			}
		}
		for k, v := range props {
			if k == "" || strings.ContainsAny(k, " \t") {
				t.Errorf("accepted key %q", k)
			}
			_, _ = ParseTimestamp(v)
			if d, ok, err := ParseTimespan(v); err == nil && ok && d <= 0 {
				t.Errorf("ParseTimespan(%q) = %v, true", v, d)
			}
		}
	})
}
