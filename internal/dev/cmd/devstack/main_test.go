package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no command", nil, "usage: devstack demo|serve"},
		{"unknown command", []string{"up"}, "usage: devstack demo|serve"},
		{"no --dir", []string{"demo"}, "-dir"},
		{"an argument", []string{"serve", "--dir", "/tmp", "extra"}, "-boxes"},
		{"bad flag", []string{"demo", "--interval", "soon"}, "invalid value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(context.Background(), tc.args, &out, &errb); code != 2 || !strings.Contains(errb.String(), tc.want) || out.Len() != 0 {
				t.Errorf("exit %d, stderr %q", code, errb.String())
			}
		})
	}
}
