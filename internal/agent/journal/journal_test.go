package journal

import (
	"bytes"
	"log/slog"
	"testing"

	"scm.tikali.ai/tikali/applications/monky/monky-deployd/internal/shared/secret"
)

func TestLines(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(New(&b, slog.LevelInfo)).With("env", "env-qa-02")
	log.Debug("hidden")
	log.Info("checkin: action=none desired=7a10 applied=7a10")
	log.Warn("lease rate-limited", "token", secret.New("s.tok3n"), "why", "429 too many")
	log.WithGroup("g").Error("failed: x", "k", "")
	want := "INFO checkin: action=none desired=7a10 applied=7a10 env=env-qa-02\n" +
		"WARN lease rate-limited env=env-qa-02 token=*** why=\"429 too many\"\n" +
		"ERROR failed: x env=env-qa-02 g.k=\"\"\n"
	if b.String() != want {
		t.Errorf("journal:\n%s\nwant:\n%s", b.String(), want)
	}
}

// Every line of a tick ends in its tick id, after any field and under any group.
func TestTickIDEndsEveryLine(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(New(&b, slog.LevelInfo).WithTick("3f9a0c1d2e4b")).With("env", "env-qa-02")
	log.Info("checkin: action=none")
	log.WithGroup("g").Warn("x", "k", "v")
	slog.New(New(&b, slog.LevelInfo).WithTick("")).Info("no tick")
	want := "INFO checkin: action=none env=env-qa-02 tick_id=3f9a0c1d2e4b\n" +
		"WARN x env=env-qa-02 g.k=v tick_id=3f9a0c1d2e4b\n" +
		"INFO no tick\n"
	if b.String() != want {
		t.Errorf("journal:\n%s\nwant:\n%s", b.String(), want)
	}
}
