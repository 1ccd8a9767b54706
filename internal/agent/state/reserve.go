package state

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"syscall"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/atomicfile"
	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/capread"
)

// The reserve keeps state.json's records when the disk is full. A failed save (ENOSPC, EDQUOT)
// cost the deploy backoff: the failing release was fetched, judged and tried again every tick
// while the disk stayed full. Releasing a reserve file on ENOSPC would hand its space to whoever
// writes next, on a full disk often the very log that filled it, and help once. This reserve is
// never released: <state.json>.reserve holds two slots of blocks the agent already owns, and a
// save the disk refuses is written over one of them in place, which allocates nothing (tmpfs,
// ext4 and xfs overwrite written blocks where they are; a copy-on-write filesystem such as btrfs
// would need new blocks and the save fails as before). The two slots alternate, so a write cut
// short leaves the other whole; each is checked by its sum. A slot counts only while state.json
// is the file it was written over (its hash, `over`): the first save that reaches state.json
// again makes every slot stale, and is followed by one write that retires them.

// ReserveSuffix names the reserve beside the state file.
const ReserveSuffix = ".reserve"

// minReserveSlot is a slot's least size: ten times a busy box's state.json.
const minReserveSlot = 64 << 10

// maxReserveFile bounds what is read of the reserve: two slots, each of room for twice a state
// (reserveSlotFor) of at most MaxFile.
const maxReserveFile = 4*MaxFile + 2*minReserveSlot

// reserveMagic starts every slot's header line; an empty slot has none.
const reserveMagic = "monky-deployd state reserve 1 "

// ErrKeptInReserve marks a save the disk refused that the reserve kept: state.json is behind,
// and the next Load reads the reserve.
var ErrKeptInReserve = errors.New("kept in the reserve")

// reserveSlot is one slot's header: the save's sequence number, the hash of the state.json it
// was written over ("none": there was none), and its content's length and sum.
type reserveSlot struct {
	seq  uint64
	over string
	size int
	sum  string
}

func (h reserveSlot) header() string {
	return fmt.Sprintf("%sseq=%d over=%s len=%d sum=%s\n", reserveMagic, h.seq, h.over, h.size, h.sum)
}

// parseReserveSlot reads a slot's header and content; ok is false for an empty, torn or foreign one.
func parseReserveSlot(b []byte) (h reserveSlot, content []byte, ok bool) {
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 || !bytes.HasPrefix(b, []byte(reserveMagic)) {
		return reserveSlot{}, nil, false
	}
	fields := strings.Fields(string(b[len(reserveMagic):nl]))
	if len(fields) != 4 {
		return reserveSlot{}, nil, false
	}
	vals := map[string]string{}
	for _, f := range fields {
		k, v, found := strings.Cut(f, "=")
		if !found {
			return reserveSlot{}, nil, false
		}
		vals[k] = v
	}
	seq, err1 := strconv.ParseUint(vals["seq"], 10, 64)
	size, err2 := strconv.Atoi(vals["len"])
	h = reserveSlot{seq: seq, over: vals["over"], size: size, sum: vals["sum"]}
	rest := b[nl+1:]
	if err1 != nil || err2 != nil || h.over == "" || size < 0 || size > len(rest) {
		return reserveSlot{}, nil, false
	}
	content = rest[:size]
	if hashOf(content) != h.sum {
		return reserveSlot{}, nil, false
	}
	return h, content, true
}

func hashOf(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// fileHash is the hash of path's content, "none" when it does not exist.
func fileHash(path string) (string, error) {
	b, err := capread.File(path, MaxFile, nil)
	if errors.Is(err, fs.ErrNotExist) {
		return "none", nil
	}
	if err != nil {
		return "", err
	}
	return hashOf(b), nil
}

// readReserve returns the newest slot written over the state.json whose hash is over, and the
// slots' size; found is false when no slot counts (no reserve, a stale or empty one).
func readReserve(path, over string) (content []byte, seq uint64, slot int, found bool) {
	if !reserveHoldsASave(path) {
		return nil, 0, 0, false
	}
	b, err := capread.File(path+ReserveSuffix, maxReserveFile, nil)
	if err != nil || len(b) < 2 || len(b)%2 != 0 {
		return nil, 0, 0, false
	}
	slot = len(b) / 2
	for i := range 2 {
		h, c, ok := parseReserveSlot(b[i*slot : (i+1)*slot])
		if ok && h.over == over && (!found || h.seq > seq) {
			content, seq, found = c, h.seq, true
		}
	}
	return content, seq, slot, found
}

// reserveHoldsASave reports whether a slot of path's reserve may hold a save: one begins with
// reserveMagic (an empty or retired slot does not). It reads the two headers' first bytes, not
// the slots (128 KiB at least): every Load asks, and on a box whose disk was never full the
// answer is no.
func reserveHoldsASave(path string) bool {
	f, fi, err := capread.Open(path + ReserveSuffix)
	if err != nil {
		return false
	}
	defer f.Close()
	if fi.Size() < 2 || fi.Size()%2 != 0 {
		return false
	}
	head := make([]byte, len(reserveMagic))
	for i := range int64(2) {
		if _, err := f.ReadAt(head, i*(fi.Size()/2)); err == nil && string(head) == reserveMagic {
			return true
		}
	}
	return false
}

// diskFull reports whether err is the filesystem (or a quota) refusing to grow.
func diskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// keepInReserve writes data over the slot not holding the newest live save, in place. It
// allocates nothing: the file's size and blocks stay as they are.
func keepInReserve(path string, data []byte) error {
	over, err := fileHash(path)
	if err != nil {
		return err
	}
	_, seq, slot, found := readReserve(path, over)
	f, err := os.OpenFile(path+ReserveSuffix, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("no reserve: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if slot == 0 {
		slot = int(fi.Size() / 2)
	}
	if int64(2*slot) != fi.Size() {
		return errors.New("the reserve is not two slots")
	}
	if !found {
		seq = 0
	}
	h := reserveSlot{seq: seq + 1, over: over, size: len(data), sum: hashOf(data)}
	body := append([]byte(h.header()), data...)
	if len(body) > slot {
		return fmt.Errorf("state.json (%d bytes) does not fit the reserve's %d-byte slot", len(data), slot)
	}
	body = append(body, bytes.Repeat([]byte{'\n'}, slot-len(body))...)
	// The slot the newest live save is not in: seq alternates 1, 2, 3… over slots 0, 1, 0…
	at := int64(h.seq%2) * int64(slot)
	if _, err := f.WriteAt(body, at); err != nil {
		return err
	}
	return f.Sync()
}

// reserveSlotFor is the slot size a state of n bytes wants: room to grow twice over.
func reserveSlotFor(n int) int {
	want := max(minReserveSlot, 2*n+512)
	return (want + 4095) / 4096 * 4096
}

// tendReserve, after state.json was written, makes sure the reserve exists with room for a
// state of n bytes, and retires slots a reserve save left (their state is on disk now). It writes
// nothing on a box whose reserve is in order; its failures wait for the next save.
func tendReserve(path string, n int) {
	rp := path + ReserveSuffix
	fi, err := os.Stat(rp)
	if err != nil || !fi.Mode().IsRegular() || fi.Size()%2 != 0 || fi.Size()/2 < int64(n+512) {
		slot := reserveSlotFor(n)
		_ = atomicfile.WriteFile(rp, bytes.Repeat([]byte{'\n'}, 2*slot), 0o600)
		return
	}
	f, err := os.OpenFile(rp, os.O_RDWR, 0)
	if err != nil {
		return
	}
	defer f.Close()
	slot := fi.Size() / 2
	head := make([]byte, len(reserveMagic))
	retired := false
	for i := range int64(2) {
		if _, err := io.ReadFull(io.NewSectionReader(f, i*slot, int64(len(head))), head); err == nil && string(head) == reserveMagic {
			// Blank the magic: the slot no longer parses, in place.
			if _, err := f.WriteAt(bytes.Repeat([]byte{'\n'}, len(head)), i*slot); err == nil {
				retired = true
			}
		}
	}
	if retired {
		_ = f.Sync()
	}
}
