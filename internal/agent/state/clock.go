package state

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"reflect"
	"time"

	"golang.org/x/sys/unix"
)

// ClockSuffix names the file beside state.json that keeps the two times every tick moves,
// last_checkin_at and last_tick_ok_at, when nothing else changed (issue 24: a converged tick
// writes no state.json). It is one line of JSON, {"last_checkin_at":…,"last_tick_ok_at":…},
// rewritten in place without fsync: a clock is worth less than an fsync a tick. Load takes its
// times when it was written over the state.json beside it (its state_sha256), so every reader
// (the tick, status, the textfile) sees the last tick's; a clock file that is torn (a crash
// while it was written), of another state.json (a crash before its removal) or missing leaves
// state.json's, at worst as old as the last tick that changed something else. A save that writes
// state.json carries the clocks and removes the file.
const ClockSuffix = ".clock"

// clocks are the two times of a State that change every tick. In the clock file they carry
// state_sha256, the hash of the state.json a save found in Save's own layout beside them (see
// saveClockOnly); it is no part of a State.
type clocks struct {
	LastCheckinAt *time.Time `json:"last_checkin_at,omitempty"`
	LastTickOKAt  *time.Time `json:"last_tick_ok_at,omitempty"`
	StateSHA256   string     `json:"state_sha256,omitempty"`
}

func (s *State) clocks() clocks {
	return clocks{LastCheckinAt: s.LastCheckinAt, LastTickOKAt: s.LastTickOKAt}
}

// equal compares the times.
func (c clocks) equal(o clocks) bool {
	return sameTime(c.LastCheckinAt, o.LastCheckinAt) && sameTime(c.LastTickOKAt, o.LastTickOKAt)
}

func sameTime(a, b *time.Time) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Equal(*b)
}

// readClock reads path's clock file; seen says whether it exists at all, ok whether it is whole.
// It opens no symlink and blocks on no FIFO (an entry planted there is no record), and reads no
// more than a record.
func readClock(path string) (c clocks, seen, ok bool) {
	f, err := openClock(path, os.O_RDONLY)
	if errors.Is(err, fs.ErrNotExist) {
		return clocks{}, false, false
	}
	if err != nil {
		return clocks{}, true, false
	}
	defer f.Close()
	data := make([]byte, clockRecord+1)
	n, _ := io.ReadFull(f, data)
	if n != clockRecord || json.Unmarshal(data[:n], &c) != nil {
		return clocks{}, true, false
	}
	return c, true, true
}

// openClock opens path's clock file without following a symlink or waiting on a FIFO, and
// refuses anything but a regular file of one name.
func openClock(path string, flag int) (*os.File, error) {
	f, err := os.OpenFile(path+ClockSuffix, flag|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Nlink != 1 {
		f.Close()
		return nil, fmt.Errorf("state: %s is not a regular file of one name", path+ClockSuffix)
	}
	return f, nil
}

// clockRecord is the clock file's size: its JSON, padded with spaces, ends in a newline. A record
// of one size is overwritten in place, allocating nothing.
const clockRecord = 256

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
	if c.StateSHA256 != "" {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, `"state_sha256":"`+c.StateSHA256+`"`...)
	}
	b = append(b, '}')
	for len(b) < clockRecord-1 {
		b = append(b, ' ')
	}
	return append(b, '\n')
}

// writeClock overwrites path's clock file in place (0600), or makes it; whole says the file on
// disk is a record, else it is cut to the new one. A symlink, FIFO or second name there is not
// written through (openClock). A failure leaves the save to state.json, which removes the entry.
var writeClock = func(path string, c clocks, whole bool) error {
	rec := encodeClock(c)
	if len(rec) != clockRecord {
		return errors.New("state: clock record too long") // a time no clock gives
	}
	f, err := openClock(path, os.O_WRONLY|os.O_CREATE)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(rec, 0)
	if err == nil && !whole {
		err = f.Truncate(clockRecord)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// adoptClock takes the clock file's times when it was written over the very content s was
// decoded from (its state_sha256 is over's): written after it, its times are the last tick's
// even when earlier (a state.json saved while the clock ran ahead must not hide every tick
// after it). A clock file of another content (left by a crash before its removal, or beside a
// hand edit) is older than it and is not taken.
func (s *State) adoptClock(path, over string) {
	c, seen, ok := readClock(path)
	s.clockSeen, s.clockWhole = seen, ok
	if !ok {
		return
	}
	s.clockFile = c
	if c.StateSHA256 != over {
		return
	}
	if c.LastCheckinAt != nil {
		s.LastCheckinAt = c.LastCheckinAt
	}
	if c.LastTickOKAt != nil {
		s.LastTickOKAt = c.LastTickOKAt
	}
}

// saveClockOnly writes only the clock file when s differs from state.json as loaded or last
// saved (onDisk) in nothing but its clocks: done says the save is complete.
//
// Whether it does is asked without encoding s where it can be: when s is, but for its clocks,
// the state Load decoded (a deep copy kept as snapshot: a deep comparison, microseconds) and the
// clock file says a save before found this very state.json (its hash) in Save's own layout. Else
// s is encoded and compared with the file as before: a file in another layout (an older agent's,
// a hand edit) is rewritten by the first save, as it always was.
func saveClockOnly(path string, s *State) (done bool) {
	if path != s.onDiskPath || s.onDisk == nil {
		return false
	}
	now := s.clocks()
	canon := hashOf(s.onDisk)
	if !(s.clockWhole && s.clockFile.StateSHA256 == canon && s.sameAsSnapshot()) {
		s.LastCheckinAt, s.LastTickOKAt = s.diskClock.LastCheckinAt, s.diskClock.LastTickOKAt
		data, err := compareEncode(s)
		s.LastCheckinAt, s.LastTickOKAt = now.LastCheckinAt, now.LastTickOKAt
		if err != nil || !bytes.Equal(data, s.onDisk) {
			return false
		}
	}
	if now.equal(s.diskClock) || (s.clockSeen && now.equal(s.clockFile)) {
		return true // nothing changed at all
	}
	now.StateSHA256 = canon
	if writeClock(path, now, s.clockWhole) != nil {
		return false // state.json carries them, or names the failure
	}
	s.clockFile, s.clockSeen, s.clockWhole = now, true, true
	return true
}

// compareEncode is encode for the comparison above; tests count it.
var compareEncode = encode

// sameAsSnapshot reports whether s holds, but for its clocks, what Load decoded from onDisk.
func (s *State) sameAsSnapshot() bool {
	if s.snapshot == nil {
		return false
	}
	a, b := *s, *s.snapshot
	for _, x := range []*State{&a, &b} {
		x.LastCheckinAt, x.LastTickOKAt = nil, nil
		// The bookkeeping of Load and Save, no part of the content.
		x.onDisk, x.onDiskPath, x.diskClock, x.clockFile = nil, "", clocks{}, clocks{}
		x.clockSeen, x.clockWhole, x.fromReserve, x.snapshot = false, false, false, nil
	}
	return reflect.DeepEqual(a, b)
}

// deepCopy copies v so that no pointer, slice or map of an exported field is shared; unexported
// fields are copied as they are (the unknown fields Load kept, a time's location: never changed
// in place).
func deepCopy(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			return v
		}
		n := reflect.New(v.Type().Elem())
		n.Elem().Set(deepCopy(v.Elem()))
		return n
	case reflect.Struct:
		n := reflect.New(v.Type()).Elem()
		n.Set(v)
		for i := range v.NumField() {
			if f := n.Field(i); f.CanSet() {
				f.Set(deepCopy(v.Field(i)))
			}
		}
		return n
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		n := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		for i := range v.Len() {
			n.Index(i).Set(deepCopy(v.Index(i)))
		}
		return n
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		n := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			n.SetMapIndex(it.Key(), deepCopy(it.Value()))
		}
		return n
	}
	return v
}

// takeSnapshot keeps a deep copy of s as it is now (what onDisk decodes to).
func (s *State) takeSnapshot() {
	s.snapshot = nil
	c := deepCopy(reflect.ValueOf(s).Elem()).Addr().Interface().(*State)
	s.snapshot = c
}
