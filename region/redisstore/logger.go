package redisstore

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/quotaplatform/quota/clock"
)

// Logger routes go-redis's own log lines to a slog.Logger, at warn
// level and at most one line per interval, with the number of lines left
// out since the last. Without it go-redis writes plain text to stderr,
// beside the JSON log and dozens of lines a second while Redis is down.
// go-redis has one logger per process: install it once, where the client
// is made, with redis.SetLogger(redisstore.NewLogger(log, time.Second,
// nil)). Safe for concurrent use.
type Logger struct {
	log   *slog.Logger
	every time.Duration
	clock clock.Clock

	mu      sync.Mutex
	last    time.Time // when a line was last written; guarded by mu
	skipped int       // lines left out since; guarded by mu
}

// NewLogger returns a Logger that writes to log at most one line
// per every (≤ 0: every line); c nil is the system clock.
func NewLogger(log *slog.Logger, every time.Duration, c clock.Clock) *Logger {
	if c == nil {
		c = clock.System()
	}
	return &Logger{log: log.With("component", "go-redis"), every: every, clock: c}
}

// Printf implements go-redis's internal.Logging.
func (l *Logger) Printf(ctx context.Context, format string, v ...any) {
	now := l.clock.Now()
	l.mu.Lock()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.skipped++
		l.mu.Unlock()
		return
	}
	skipped := l.skipped
	l.last, l.skipped = now, 0
	l.mu.Unlock()
	l.log.WarnContext(ctx, fmt.Sprintf(format, v...), "skipped", skipped)
}
