// Package unitscore measures how exposed the packages' systemd units are, as
// `systemd-analyze security --offline=true` judges a unit from its file alone (0 = locked down,
// 10 = exposed), and holds the limits the project keeps them under, so that a unit that loses a
// hardening line fails CI instead of shipping.
package unitscore

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"strconv"
)

// Limits are the highest exposure each unit may have. The agent's tick drives docker through
// its socket (unix sockets), the proxy and the exporter are plain network clients: they can be
// locked down further.
var Limits = map[string]float64{
	"monky-deployd.service":       3.5,
	"monky-deployd-proxy.service": 2.5,
	"fleetctl-exporter.service":   2.5,
}

// Result is one unit's exposure against its limit.
type Result struct {
	Unit            string
	Exposure, Limit float64
	// Verdict is systemd-analyze's word for the exposure (OK, MEDIUM, EXPOSED, UNSAFE).
	Verdict string
}

// Over says whether the unit is more exposed than its limit.
func (r Result) Over() bool { return r.Exposure > r.Limit }

func (r Result) String() string {
	mark := "ok"
	if r.Over() {
		mark = "OVER THE LIMIT"
	}
	return fmt.Sprintf("%-28s exposure %.1f %-8s limit %.1f  %s", r.Unit, r.Exposure, r.Verdict, r.Limit, mark)
}

var overall = regexp.MustCompile(`Overall exposure level for (\S+): ([0-9]+(?:\.[0-9]+)?) (\S+)`)

// Parse reads systemd-analyze security's overall line for unit.
func Parse(out []byte, unit string) (float64, string, error) {
	for _, m := range overall.FindAllSubmatch(out, -1) {
		if string(m[1]) != unit {
			continue
		}
		v, err := strconv.ParseFloat(string(m[2]), 64)
		if err != nil {
			return 0, "", fmt.Errorf("unitscore: %s: exposure %q: %w", unit, m[2], err)
		}
		return v, string(m[3]), nil
	}
	return 0, "", fmt.Errorf("unitscore: systemd-analyze printed no overall exposure for %s:\n%s", unit, out)
}

// Check scores every unit of Limits found under root (a directory the packages were extracted
// into) with the systemd-analyze at analyze, sorted by unit.
func Check(ctx context.Context, analyze, root string) ([]Result, error) {
	units := make([]string, 0, len(Limits))
	for u := range Limits {
		units = append(units, u)
	}
	sort.Strings(units)
	var out []Result
	for _, u := range units {
		cmd := exec.CommandContext(ctx, analyze, "security", "--offline=true", "--no-pager", "--root="+root, u)
		cmd.Env = []string{"SYSTEMD_COLORS=0", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		b, err := cmd.CombinedOutput()
		if err != nil {
			return nil, fmt.Errorf("unitscore: systemd-analyze security %s: %v\n%s", u, err, b)
		}
		v, verdict, err := Parse(b, u)
		if err != nil {
			return nil, err
		}
		out = append(out, Result{Unit: u, Exposure: v, Limit: Limits[u], Verdict: verdict})
	}
	return out, nil
}
