// Package diskspace measures the free space a docker pull can use, on every filesystem that pull
// can fill, so the agent refuses a bundle before the pull dies with "no space left on device".
package diskspace

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
)

// StatFunc reports the bytes free to an unprivileged writer at path (fs.ErrNotExist if absent).
type StatFunc func(path string) (int64, error)

// Measure is one filesystem measured for Tightest.
type Measure struct {
	Path string // the path asked about
	At   string // the existing directory actually measured (Path, or its nearest existing parent)
	Free int64  // bytes available
}

// Meter measures free space through Stat, which tests replace to set the free space per path.
type Meter struct {
	Stat StatFunc // nil means Statfs
}

// Free measures path, walking up to its nearest existing parent: docker's data-root may not
// exist yet on a fresh box, and the filesystem it will be created on is what a pull fills.
func (m Meter) Free(path string) (int64, error) {
	free, _, err := m.free(path)
	return free, err
}

func (m Meter) free(path string) (int64, string, error) {
	if path == "" {
		return 0, "", errors.New("diskspace: empty path")
	}
	p := filepath.Clean(path)
	for {
		free, err := m.stat(p)
		if err == nil {
			return free, p, nil
		}
		parent := filepath.Dir(p)
		if !errors.Is(err, fs.ErrNotExist) || parent == p {
			return 0, p, fmt.Errorf("diskspace: measure %q: %w", path, err)
		}
		p = parent
	}
}

// Tightest returns the smallest free space of paths and each measure. The first (data-root) is
// always measured; a later path that does not exist is a root the box does not use, skipped.
// Any other failure is an error: a guess would let a pull fill the disk.
func (m Meter) Tightest(paths []string) (int64, []Measure, error) {
	if len(paths) == 0 {
		return 0, nil, errors.New("diskspace: no paths to measure")
	}
	var measured []Measure
	var tightest int64
	for i, p := range paths {
		var free int64
		var at string
		var err error
		if i == 0 {
			free, at, err = m.free(p)
		} else {
			at = filepath.Clean(p)
			free, err = m.stat(at)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				err = fmt.Errorf("diskspace: measure %q: %w", p, err)
			}
		}
		if err != nil {
			return 0, measured, err
		}
		measured = append(measured, Measure{Path: p, At: at, Free: free})
		if len(measured) == 1 || free < tightest {
			tightest = free
		}
	}
	return tightest, measured, nil
}

func (m Meter) stat(p string) (int64, error) {
	if m.Stat != nil {
		return m.Stat(p)
	}
	return Statfs(p)
}

// Free measures path on the real filesystem (see Meter.Free).
func Free(path string) (int64, error) { return Meter{}.Free(path) }

// Tightest measures paths on the real filesystems (see Meter.Tightest).
func Tightest(paths []string) (int64, []Measure, error) { return Meter{}.Tightest(paths) }
