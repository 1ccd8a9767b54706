package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRun(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	versionFile := filepath.Join(dir, "VERSION")
	if err := os.WriteFile(versionFile, []byte("0.2.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	common := []string{"-deployd", bin, "-fleetctl", bin, "-packaging", "..", "-out", filepath.Join(dir, "dist"), "-version-file", versionFile}
	for _, tc := range []struct {
		name     string
		args     []string
		epoch    string
		wantCode int
		wantOut  string
	}{
		{"version from the file", common, "1700000000", 0, "monky-deployd_0.2.0_amd64.deb"},
		{"version flag wins", append([]string{"-version", "0.2.1"}, common...), "", 0, "monky-deployd_0.2.1_amd64.deb"},
		{"bad SOURCE_DATE_EPOCH", common, "yesterday", 2, "SOURCE_DATE_EPOCH"},
		{"bad version", append([]string{"-version", "latest"}, common...), "", 2, "Version"},
		{"unknown flag", []string{"-colour"}, "", 2, "colour"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(tc.args, tc.epoch, &out, &errOut)
			if code != tc.wantCode || !strings.Contains(out.String()+errOut.String(), tc.wantOut) {
				t.Errorf("exit %d (want %d), stdout %q, stderr %q (want %q)", code, tc.wantCode, out.String(), errOut.String(), tc.wantOut)
			}
			if code == 0 {
				if _, err := os.Stat(strings.TrimSpace(out.String())); err != nil {
					t.Errorf("the printed path does not exist: %v", err)
				}
			}
		})
	}
}
