// Package systemd reads the agent's timer state for check-ins and `status`; unobservable fields
// stay null rather than guessed (0.1.9: an upgrade silently disabled the timer).
package systemd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/runner"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/clip"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// TimerUnit is the agent's heartbeat, the unit whose state every check-in reports.
const TimerUnit = "monky-deployd.timer"

// BootedDir exists exactly when the system was booted with systemd (what sd_booted(3) checks).
const BootedDir = "/run/systemd/system"

// Probe reads timer state. The zero value is not usable: Runner is required.
type Probe struct {
	Runner    runner.Runner
	Systemctl string // "" means "systemctl"
	BootedDir string // "" means BootedDir; tests point it at a temp dir
	// Monotonic returns CLOCK_MONOTONIC (nil: the real one); the timer's next elapse is published
	// on it and must be converted to wall time.
	Monotonic func() (time.Duration, error)
}

// TimerState is Probe{Runner: r}.TimerState.
func TimerState(ctx context.Context, r runner.Runner, unit string, now time.Time) *protocol.Timer {
	return Probe{Runner: r}.TimerState(ctx, unit, now)
}

// showProps are the properties asked of `systemctl show`.
var showProps = []string{"LoadState", "UnitFileState", "ActiveState", "NextElapseUSecRealtime", "NextElapseUSecMonotonic"}

// TimerState returns the unit's state at now; unobservable fields are nil (`systemctl show` says
// "inactive" for unknown units). Enabled means enabled or enabled-runtime, which start at boot.
func (p Probe) TimerState(ctx context.Context, unit string, now time.Time) *protocol.Timer {
	observed := now.UTC().Format(time.RFC3339)
	t := &protocol.Timer{Unit: unit, ObservedAt: &observed}
	booted := p.BootedDir
	if booted == "" {
		booted = BootedDir
	}
	if fi, err := os.Stat(booted); err != nil || !fi.IsDir() {
		return t
	}
	bin := p.Systemctl
	if bin == "" {
		bin = "systemctl"
	}
	res, err := p.Runner.Run(ctx, runner.Cmd{
		Name: bin,
		Args: []string{"show", unit, "--no-pager", "-p", strings.Join(showProps, ",")},
		// Local zone abbreviations are ambiguous ("CST" is three zones); UTC and C locale parse exactly.
		Env: []string{"TZ=UTC", "LC_ALL=C"},
	})
	if err != nil || res.ExitCode != 0 {
		return t
	}
	props, err := ParseShow(res.Stdout)
	if err != nil {
		return t
	}
	if props["LoadState"] == "not-found" {
		return t
	}
	if v := props["UnitFileState"]; v != "" {
		enabled := v == "enabled" || v == "enabled-runtime"
		t.Enabled = &enabled
	}
	if v, ok := props["ActiveState"]; ok && v != "" {
		active := v == "active"
		t.Active = &active
	}
	if next, ok := ParseTimestamp(props["NextElapseUSecRealtime"]); ok {
		s := next.UTC().Format(time.RFC3339)
		t.NextElapse = &s
	} else if at, ok := p.monotonicToWall(props["NextElapseUSecMonotonic"], now); ok {
		s := at.UTC().Format(time.RFC3339)
		t.NextElapse = &s
	}
	return t
}

func (p Probe) monotonicToWall(v string, now time.Time) (time.Time, bool) {
	next, ok, err := ParseTimespan(v)
	if err != nil || !ok {
		return time.Time{}, false
	}
	mono := p.Monotonic
	if mono == nil {
		mono = clockMonotonic
	}
	cur, err := mono()
	if err != nil {
		return time.Time{}, false
	}
	return now.Add(next - cur).Truncate(time.Second), true
}

func clockMonotonic() (time.Duration, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, err
	}
	return time.Duration(ts.Nano()), nil
}

// ParseShow reads `systemctl show` KEY=VALUE lines; a line without '=' or key is an error naming it.
func ParseShow(b []byte) (map[string]string, error) {
	props := map[string]string{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return nil, fmt.Errorf("systemd: show: line %d is not KEY=VALUE: %q", i+1, clip.Head(line, 60))
		}
		props[k] = strings.TrimSpace(v)
	}
	return props, nil
}

// ParseTimestamp reads a UTC realtime timestamp as systemctl prints it ("Wed 2026-12-02 10:01:00
// UTC" or "@1796205660"); "n/a", "infinity" or other zones give false.
func ParseTimestamp(v string) (time.Time, bool) {
	v = strings.TrimSpace(v)
	if secs, ok := strings.CutPrefix(v, "@"); ok {
		n, err := strconv.ParseInt(secs, 10, 64)
		if err != nil || n <= 0 {
			return time.Time{}, false
		}
		return time.Unix(n, 0).UTC(), true
	}
	fields := strings.Fields(v)
	if len(fields) != 4 || (fields[3] != "UTC" && fields[3] != "GMT") {
		return time.Time{}, false
	}
	t, err := time.Parse("Mon 2006-01-02 15:04:05", strings.Join(fields[:3], " "))
	if err != nil {
		// Newer systemd may print microseconds with --timestamp=us.
		t, err = time.Parse("Mon 2006-01-02 15:04:05.999999", strings.Join(fields[:3], " "))
		if err != nil {
			return time.Time{}, false
		}
	}
	return t.UTC(), true
}

// timespanUnits are format_timespan's suffixes (month and year are systemd's averages).
var timespanUnits = map[string]time.Duration{
	"y":     31557600 * time.Second,
	"month": 2629800 * time.Second,
	"w":     7 * 24 * time.Hour,
	"d":     24 * time.Hour,
	"h":     time.Hour,
	"min":   time.Minute,
	"s":     time.Second,
	"ms":    time.Millisecond,
	"us":    time.Microsecond,
}

// ParseTimespan reads "1d 2h 3min 4.500000s"; "", "0", "infinity" give no value; junk is an error.
func ParseTimespan(v string) (time.Duration, bool, error) {
	v = strings.TrimSpace(v)
	if v == "" || v == "0" || v == "infinity" || v == "n/a" {
		return 0, false, nil
	}
	var total time.Duration
	for _, f := range strings.Fields(v) {
		i := 0
		for i < len(f) && (f[i] >= '0' && f[i] <= '9' || f[i] == '.') {
			i++
		}
		num, suffix := f[:i], f[i:]
		unit, ok := timespanUnits[suffix]
		if num == "" || !ok {
			return 0, false, fmt.Errorf("systemd: timespan %q: bad component %q", clip.Head(v, 60), f)
		}
		x, err := strconv.ParseFloat(num, 64)
		if err != nil {
			return 0, false, fmt.Errorf("systemd: timespan %q: bad number %q", clip.Head(v, 60), num)
		}
		d := x * float64(unit)
		if d > float64(1<<62) || total > 1<<62 {
			return 0, false, errors.New("systemd: timespan out of range")
		}
		total += time.Duration(d)
	}
	return total, total > 0, nil
}

// UnitActive reports whether unit is active (`systemctl is-active`, exit 0). Where the system was
// not booted with systemd, or systemctl cannot be run, it errs: not known to be active.
func (p Probe) UnitActive(ctx context.Context, unit string) (bool, error) {
	booted := p.BootedDir
	if booted == "" {
		booted = BootedDir
	}
	if fi, err := os.Stat(booted); err != nil || !fi.IsDir() {
		return false, errors.New("systemd: not booted with systemd")
	}
	bin := p.Systemctl
	if bin == "" {
		bin = "systemctl"
	}
	res, err := p.Runner.Run(ctx, runner.Cmd{Name: bin, Args: []string{"is-active", "--quiet", unit}})
	if err != nil {
		return false, fmt.Errorf("systemd: %s is-active %s: %w", bin, unit, err)
	}
	return res.ExitCode == 0, nil
}
