package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// daysValue is a duration flag that also takes whole days ("21d", "400d"): certificate
// horizons are counted in days, and Go's durations stop at hours.
type daysValue time.Duration

func (d *daysValue) Set(s string) error {
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.ParseInt(n, 10, 64)
		if err != nil || days < 0 || days > 100*365 {
			return fmt.Errorf("want whole days like 21d, got %q", s)
		}
		*d = daysValue(time.Duration(days) * 24 * time.Hour)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("want a duration like 21d or 504h, got %q", s)
	}
	*d = daysValue(v)
	return nil
}

func (d *daysValue) String() string {
	v := time.Duration(*d)
	if v%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", v/(24*time.Hour))
	}
	return v.String()
}

func (d *daysValue) Type() string { return "duration" }
