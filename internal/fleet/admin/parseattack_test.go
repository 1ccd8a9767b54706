package admin

import (
	"strings"
	"testing"
)

// A page member spelt like one of the page's own but for case ("Next") is a peer's bug, not a
// member tenancy added: ignored, a mis-cased cursor would end the listing at its first page and
// fleetctl would judge half the fleet.
func TestAgentsPageRefusesAMisCasedMember(t *testing.T) {
	for _, key := range []string{"Next", "NEXT", "Agents", "Now"} {
		in := `{"now":"2026-12-03T10:00:00Z","agents":[],"` + key + `":"x"}`
		_, _, err := readAgentsPage(strings.NewReader(in), nil)
		if err == nil || !strings.Contains(err.Error(), `"`+key+`"`) {
			t.Errorf("%s: %v; want the member named", key, err)
		}
	}
}
