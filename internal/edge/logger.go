package edge

import (
	"fmt"
	"io"
	"log/slog"
)

// NewLogger is a daemon's logger: JSON lines on w at level (--log-level:
// debug, info, warn or error), with every time.Duration written as text
// ("1.5s"), as its flag is given, instead of slog's raw nanoseconds.
func NewLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l, ReplaceAttr: durationAsText})), nil
}

// durationAsText is a slog ReplaceAttr that writes durations as text.
func durationAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}
