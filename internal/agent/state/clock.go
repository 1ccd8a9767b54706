package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"time"
)

// ClockSuffix names the file beside state.json that keeps the two times every tick moves,
// last_checkin_at and last_tick_ok_at, when nothing else changed (issue 24: a converged tick
// writes no state.json). It is one line of JSON, {"last_checkin_at":…,"last_tick_ok_at":…},
// rewritten in place without fsync: a clock is worth less than an fsync a tick. Load reads
// each time from whichever of state.json and the clock file holds the later one, so every reader
// (the tick, status, the textfile) sees the last tick's; a clock file that is torn (a crash
// while it was written) or missing leaves state.json's, at worst as old as the last tick that
// changed something else. A save that writes state.json carries the clocks and removes the file.
const ClockSuffix = ".clock"

// clocks are the two times of a State that change every tick.
type clocks struct {
	LastCheckinAt *time.Time `json:"last_checkin_at,omitempty"`
	LastTickOKAt  *time.Time `json:"last_tick_ok_at,omitempty"`
}

func (s *State) clocks() clocks { return clocks{s.LastCheckinAt, s.LastTickOKAt} }

func (c clocks) equal(o clocks) bool {
	return sameTime(c.LastCheckinAt, o.LastCheckinAt) && sameTime(c.LastTickOKAt, o.LastTickOKAt)
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

// later is the later of a and b (nil is earliest).
func later(a, b *time.Time) *time.Time {
	if a == nil || (b != nil && b.After(*a)) {
		return b
	}
	return a
}

// readClock reads path's clock file; seen says whether it exists at all, ok whether it is whole.
func readClock(path string) (c clocks, seen, ok bool) {
	data, err := os.ReadFile(path + ClockSuffix)
	if errors.Is(err, fs.ErrNotExist) {
		return clocks{}, false, false
	}
	if err != nil || len(data) != clockRecord || json.Unmarshal(data, &c) != nil {
		return clocks{}, true, false
	}
	return c, true, true
}

// clockRecord is the clock file's size: its JSON, padded with spaces, ends in a newline. A record
// of one size is overwritten in place, allocating nothing.
const clockRecord = 128

// encodeClock is the clock file's content for c.
func encodeClock(c clocks) []byte {
	b := make([]byte, 0, clockRecord)
	b = append(b, '{')
	for _, f := range []struct {
		key string
		at  *time.Time
	}{{"last_checkin_at", c.LastCheckinAt}, {"last_tick_ok_at", c.LastTickOKAt}} {
		if f.at == nil {
			continue
		}
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, `"`+f.key+`":"`...)
		b = f.at.AppendFormat(b, time.RFC3339Nano)
		b = append(b, '"')
	}
	b = append(b, '}')
	for len(b) < clockRecord-1 {
		b = append(b, ' ')
	}
	return append(b, '\n')
}

// writeClock overwrites path's clock file in place (0600), or makes it; whole says the file on
// disk is a record, else it is cut to the new one. A failure leaves the save to state.json.
var writeClock = func(path string, c clocks, whole bool) error {
	rec := encodeClock(c)
	if len(rec) != clockRecord {
		return errors.New("state: clock record too long") // a time no clock gives
	}
	flag := os.O_WRONLY | os.O_CREATE
	if !whole {
		flag |= os.O_TRUNC
	}
	f, err := os.OpenFile(path+ClockSuffix, flag, 0o600)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(rec, 0)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// adoptClock takes the clock file's times where they are later than s's (state.json's).
func (s *State) adoptClock(path string) {
	c, seen, ok := readClock(path)
	s.clockSeen, s.clockWhole = seen, ok
	if !ok {
		return
	}
	s.clockFile = c
	s.LastCheckinAt = later(s.LastCheckinAt, c.LastCheckinAt)
	s.LastTickOKAt = later(s.LastTickOKAt, c.LastTickOKAt)
}

// saveClockOnly writes only the clock file when s differs from state.json as loaded or last
// saved (onDisk) in nothing but its clocks: done says the save is complete.
func saveClockOnly(path string, s *State) (done bool) {
	if path != s.onDiskPath || s.onDisk == nil {
		return false
	}
	now := s.clocks()
	s.LastCheckinAt, s.LastTickOKAt = s.diskClock.LastCheckinAt, s.diskClock.LastTickOKAt
	data, err := encode(s)
	s.LastCheckinAt, s.LastTickOKAt = now.LastCheckinAt, now.LastTickOKAt
	if err != nil || !bytes.Equal(data, s.onDisk) {
		return false
	}
	if now.equal(s.diskClock) || (s.clockSeen && now.equal(s.clockFile)) {
		return true // nothing changed at all
	}
	if writeClock(path, now, s.clockWhole) != nil {
		return false // state.json carries them, or names the failure
	}
	s.clockFile, s.clockSeen, s.clockWhole = now, true, true
	return true
}
