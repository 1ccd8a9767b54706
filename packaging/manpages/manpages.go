// Package manpages makes the man pages of a cobra command tree: one page per command (the root
// and every available subcommand, as cobra's own generator names them: monky-deployd-tick.8),
// in roff, dated with the build's date so that the same tree gives the same bytes.
package manpages

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// Page is one man page: its file name under /usr/share/man/man<section>/ and its roff.
type Page struct {
	Name string // e.g. monky-deployd-tick.8
	Roff []byte
}

// Options say how the pages are headed.
type Options struct {
	// Section is the manual section: "8" for the agent (a daemon an administrator runs), "1" for
	// fleetctl (a command an operator runs).
	Section string
	// Source is the footer's left field, e.g. "monky-deployd 0.3.0".
	Source string
	// Manual is the header's centre field.
	Manual string
	// Date is the page's date (SOURCE_DATE_EPOCH of the build); it must not be zero.
	Date time.Time
}

// Generate makes the pages of root and every available command under it, sorted by name.
func Generate(root *cobra.Command, o Options) ([]Page, error) {
	if o.Section == "" || o.Source == "" || o.Date.IsZero() {
		return nil, errors.New("manpages: Section, Source and Date are required")
	}
	var cmds []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		// cobra's own "auto generated on <date>" footer would make every build differ.
		c.DisableAutoGenTag = true
		cmds = append(cmds, c)
		for _, sub := range c.Commands() {
			if sub.IsAvailableCommand() && !sub.IsAdditionalHelpTopicCommand() {
				walk(sub)
			}
		}
	}
	walk(root)
	pages := make([]Page, 0, len(cmds))
	for _, c := range cmds {
		date := o.Date.UTC()
		var roff bytes.Buffer
		h := &doc.GenManHeader{Section: o.Section, Source: o.Source, Manual: o.Manual, Date: &date}
		if err := doc.GenMan(c, h, &roff); err != nil {
			return nil, fmt.Errorf("manpages: %s: %w", c.CommandPath(), err)
		}
		name := strings.ReplaceAll(c.CommandPath(), " ", "-") + "." + o.Section
		pages = append(pages, Page{Name: name, Roff: roff.Bytes()})
	}
	sort.Slice(pages, func(i, j int) bool { return pages[i].Name < pages[j].Name })
	return pages, nil
}
