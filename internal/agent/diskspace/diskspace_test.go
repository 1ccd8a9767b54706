package diskspace

import (
	"errors"
	"io/fs"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
)

// fakeFS answers Stat from a table: a path in the table has that much free space, a path listed
// in denied fails with EACCES, anything else does not exist.
type fakeFS struct {
	free   map[string]int64
	denied map[string]bool
}

func (f *fakeFS) stat(p string) (int64, error) {
	if f.denied[p] {
		return 0, &fs.PathError{Op: "statfs", Path: p, Err: syscall.EACCES}
	}
	if n, ok := f.free[p]; ok {
		return n, nil
	}
	return 0, &fs.PathError{Op: "statfs", Path: p, Err: syscall.ENOENT}
}

func TestFree(t *testing.T) {
	tests := []struct {
		name    string
		fs      fakeFS
		path    string
		want    int64
		wantErr bool
	}{
		{"existing path", fakeFS{free: map[string]int64{"/var/lib/docker": 10}}, "/var/lib/docker", 10, false},
		{"walks up to the nearest existing parent", fakeFS{free: map[string]int64{"/var": 7, "/": 1}}, "/var/lib/docker/", 7, false},
		{"walks up to the root", fakeFS{free: map[string]int64{"/": 3}}, "/home/docker-data", 3, false},
		{"nothing exists", fakeFS{}, "/x/y", 0, true},
		{"a failure other than absence stops the walk", fakeFS{free: map[string]int64{"/": 3}, denied: map[string]bool{"/srv": true}}, "/srv/docker", 0, true},
		{"empty path", fakeFS{}, "", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Meter{Stat: tt.fs.stat}.Free(tt.path)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Free(%q) error = %v, wantErr %v", tt.path, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("Free(%q) = %d, want %d", tt.path, got, tt.want)
			}
		})
	}
}

func TestTightest(t *testing.T) {
	tests := []struct {
		name     string
		fs       fakeFS
		paths    []string
		want     int64
		measured []Measure
		wantErr  bool
	}{
		{
			// env-dev-08: 93 GiB on the data-root, 2.8 GiB where containerd kept the layers.
			name:     "containerd root on a tighter filesystem wins",
			fs:       fakeFS{free: map[string]int64{"/home/docker-data": 93 << 30, "/var/lib/containerd": 2867 << 20}},
			paths:    []string{"/home/docker-data", "/var/lib/containerd"},
			want:     2867 << 20,
			measured: []Measure{{"/home/docker-data", "/home/docker-data", 93 << 30}, {"/var/lib/containerd", "/var/lib/containerd", 2867 << 20}},
		},
		{
			name:     "data-root tighter",
			fs:       fakeFS{free: map[string]int64{"/var/lib/docker": 5, "/var/lib/containerd": 9}},
			paths:    []string{"/var/lib/docker", "/var/lib/containerd"},
			want:     5,
			measured: []Measure{{"/var/lib/docker", "/var/lib/docker", 5}, {"/var/lib/containerd", "/var/lib/containerd", 9}},
		},
		{
			name:     "an absent later path is skipped",
			fs:       fakeFS{free: map[string]int64{"/var/lib/docker": 5, "/var": 1}},
			paths:    []string{"/var/lib/docker", "/var/lib/containerd"},
			want:     5,
			measured: []Measure{{"/var/lib/docker", "/var/lib/docker", 5}},
		},
		{
			name:     "the first path is measured through its parent",
			fs:       fakeFS{free: map[string]int64{"/var": 4, "/var/lib/containerd": 9}},
			paths:    []string{"/var/lib/docker", "/var/lib/containerd"},
			want:     4,
			measured: []Measure{{"/var/lib/docker", "/var", 4}, {"/var/lib/containerd", "/var/lib/containerd", 9}},
		},
		{
			name:    "an unreadable later path is an error, not a skip",
			fs:      fakeFS{free: map[string]int64{"/var/lib/docker": 5}, denied: map[string]bool{"/var/lib/containerd": true}},
			paths:   []string{"/var/lib/docker", "/var/lib/containerd"},
			wantErr: true,
		},
		{
			name:    "nothing to measure",
			paths:   nil,
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, measured, err := Meter{Stat: tt.fs.stat}.Tightest(tt.paths)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Tightest error = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if got != tt.want {
				t.Errorf("Tightest = %d, want %d", got, tt.want)
			}
			if !slices.Equal(measured, tt.measured) {
				t.Errorf("measured = %+v, want %+v", measured, tt.measured)
			}
		})
	}
}

func TestStatfsReal(t *testing.T) {
	dir := t.TempDir()
	free, err := Statfs(dir)
	if err != nil {
		t.Fatalf("Statfs(%q): %v", dir, err)
	}
	if free <= 0 {
		t.Errorf("Statfs(%q) = %d, want a positive number of bytes", dir, free)
	}
	_, err = Statfs(filepath.Join(dir, "absent"))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Statfs(absent) error = %v, want fs.ErrNotExist (the walk-up depends on it)", err)
	}
	// The package-level helpers use the real statfs and walk up the same way.
	got, err := Free(filepath.Join(dir, "not", "yet", "created"))
	if err != nil || got <= 0 {
		t.Errorf("Free(below a temp dir) = %d, %v", got, err)
	}
	if _, measured, err := Tightest([]string{dir, filepath.Join(dir, "absent")}); err != nil || len(measured) != 1 {
		t.Errorf("Tightest = %+v, %v; want one measure", measured, err)
	}
}
