package manpages

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	agentcli "scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/agent/cli"
	fleetcli "scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/fleet/cli"
)

var date = time.Date(2026, 12, 3, 19, 35, 5, 0, time.UTC)

// commandPaths lists every command a user can run in the tree, as the page names them.
func commandPaths(c *cobra.Command) []string {
	out := []string{strings.ReplaceAll(c.CommandPath(), " ", "-")}
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() && !sub.IsAdditionalHelpTopicCommand() {
			out = append(out, commandPaths(sub)...)
		}
	}
	return out
}

func TestEveryCommandHasAPage(t *testing.T) {
	for _, tc := range []struct {
		tree    func() *cobra.Command
		section string
		want    []string // commands that must be there whatever else is added
	}{
		{agentcli.CommandTree, "8", []string{"monky-deployd", "monky-deployd-tick", "monky-deployd-status", "monky-deployd-doctor", "monky-deployd-proxy", "monky-deployd-version"}},
		{fleetcli.CommandTree, "1", []string{"fleetctl", "fleetctl-status", "fleetctl-gate", "fleetctl-onboard", "fleetctl-repair-attrs", "fleetctl-exporter", "fleetctl-version"}},
	} {
		pages, err := Generate(tc.tree(), Options{Section: tc.section, Source: "test 0.3.0", Manual: "Monky", Date: date})
		if err != nil {
			t.Fatal(err)
		}
		byName := map[string]string{}
		for _, p := range pages {
			byName[p.Name] = string(p.Roff)
		}
		paths := commandPaths(tc.tree())
		for _, w := range tc.want {
			if !contains(paths, w) {
				t.Errorf("the command tree lost %s", w)
			}
		}
		if len(pages) != len(paths) {
			t.Errorf("%d pages for %d commands: %v", len(pages), len(paths), paths)
		}
		for _, cmd := range paths {
			page, ok := byName[cmd+"."+tc.section]
			if !ok {
				t.Errorf("no page for %s", cmd)
				continue
			}
			if !strings.Contains(page, `.TH "`+strings.ToUpper(cmd)+`" "`+tc.section+`" "Dec 2026" "test 0.3.0" "Monky"`) {
				t.Errorf("%s: header is not the expected .TH line:\n%s", cmd, firstLines(page, 4))
			}
			// whatis (lexgrog) reads NAME as "name - description".
			if !strings.Contains(page, ".SH NAME\n"+cmd+" - ") {
				t.Errorf("%s: NAME section is not \"name \\- description\":\n%s", cmd, firstLines(page, 8))
			}
			if strings.Contains(page, "Auto generated") {
				t.Errorf("%s: carries cobra's dated auto-generation footer", cmd)
			}
		}
	}
}

func TestSameTreeSameBytes(t *testing.T) {
	o := Options{Section: "8", Source: "monky-deployd 0.3.0", Manual: "Monky", Date: date}
	a, err := Generate(agentcli.CommandTree(), o)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Generate(agentcli.CommandTree(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(a) != len(b) {
		t.Fatalf("%d pages, then %d", len(a), len(b))
	}
	for i := range a {
		if a[i].Name != b[i].Name || !bytes.Equal(a[i].Roff, b[i].Roff) {
			t.Errorf("%s differs between two runs", a[i].Name)
		}
	}
}

func TestOptionsRequired(t *testing.T) {
	for _, o := range []Options{
		{Source: "x", Date: date},
		{Section: "8", Date: date},
		{Section: "8", Source: "x"},
	} {
		if _, err := Generate(agentcli.CommandTree(), o); err == nil {
			t.Errorf("Generate(%+v) did not refuse", o)
		}
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}
