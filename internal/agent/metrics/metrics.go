// Package metrics writes the box's Prometheus metrics as a node_exporter textfile after every
// tick (a timer one-shot cannot be scraped). No secrets, no unbounded label values.
package metrics

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/state"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/atomicfile"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/protocol"
)

// Namespace prefixes every series the agent writes.
const Namespace = "monky_deployd"

// Tick is what one tick leaves for the textfile; zero fields are unknown and left out.
type Tick struct {
	EnvID   string
	Version string
	Start   time.Time
	End     time.Time
	// ExitCode is the process's exit code.
	ExitCode int
	// LockHeld: another tick held the lock, so this one did nothing (exit 0).
	LockHeld bool
	// State is state.json as the tick left it; nil when unreadable.
	State *state.State
	// Report is the last report the tick sent; nil when it sent none.
	Report *Report
	// Containers are what the tick's last report carried; nil when it looked at none.
	Containers []protocol.Container
	// Disk is the free space of each filesystem a pull fills, measured after the tick.
	Disk []Disk
	// DiskFloorBytes is the free space no apply may go under (disk.headroom_bytes); 0 unknown.
	DiskFloorBytes int64
	// Interval is the timer's interval (interval_s), which staleness is judged against; 0 unknown.
	Interval time.Duration

	// Horizons: when the identity's certificate, the CA in the identity (id.ca, its first to
	// expire) and bao.ca_file expire; a zero one (unreadable, absent) is left out.
	IdentityCertNotAfter, IdentityCANotAfter, BaoCANotAfter time.Time
}

// Report is a report the tick sent to tenancy.
type Report struct {
	Result    string
	Delivered bool
}

// Disk is one measured filesystem.
type Disk struct {
	// Path is the configured path (docker's data-root, containerd's root): a label, bounded.
	Path      string
	FreeBytes int64
}

// Results is the fixed list of last_result series, so a newer state cannot add series.
var Results = []string{
	protocol.ResultApplied, protocol.ResultHealthy, protocol.ResultUnhealthy,
	protocol.ResultFailed, protocol.ResultRefused, protocol.ResultDown,
}

// ContainerStates are the values of monky_deployd_containers' state label.
var ContainerStates = []string{"healthy", "unhealthy", "starting", "running", "not_running"}

// containerState: running without health check is "running"; anything not running "not_running".
func containerState(c protocol.Container) string {
	switch c.Health {
	case "healthy", "unhealthy", "starting":
		return c.Health
	}
	if c.State == "running" {
		return "running"
	}
	return "not_running"
}

// Encode writes t in the text exposition format (text.go).
func Encode(t Tick) ([]byte, error) {
	var p page
	collect(t, &p)
	return p.text()
}

// ErrNoDir: no textfile directory, so node_exporter is absent (or reads elsewhere); nothing written.
var ErrNoDir = errors.New("textfile directory does not exist")

// WriteFile replaces path atomically, mode 0644 for node_exporter; ErrNoDir when the directory is
// missing (the agent never creates it).
func WriteFile(path string, t Tick) error {
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		return ErrNoDir
	} else if err != nil {
		return fmt.Errorf("metrics: %w", err)
	} else if !st.IsDir() {
		return fmt.Errorf("metrics: %s is not a directory", dir)
	}
	data, err := Encode(t)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	return nil
}
