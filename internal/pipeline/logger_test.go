package pipeline

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
)

// TestWatermillLogLevels: watermill's per-message info lines are logged at
// debug, its trace and debug lines only when debug is on, and errors always.
func TestWatermillLogLevels(t *testing.T) {
	t.Parallel()
	for _, level := range []slog.Level{slog.LevelInfo, slog.LevelDebug} {
		var buf bytes.Buffer
		l := wmLogger(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))).With(watermill.LogFields{"pipeline": "p"})
		l.Trace("trace line", nil)
		l.Debug("debug line", watermill.LogFields{"a": 1})
		l.Info("info line", nil)
		l.Error("error line", nil, nil)
		out := buf.String()
		debugOn := level == slog.LevelDebug
		for line, want := range map[string]bool{"trace line": false, "debug line": debugOn, "info line": debugOn, "error line": true} {
			if strings.Contains(out, line) != want {
				t.Errorf("level %s: %q logged: %v, want %v\n%s", level, line, !want, want, out)
			}
		}
		if debugOn && !strings.Contains(out, "level=DEBUG msg=\"info line\" pipeline=p") {
			t.Errorf("info line not lowered to debug with its fields:\n%s", out)
		}
	}
}
