package settings

import "time"

// Defaults of the settings every daemon has (cmd/regional-limiter,
// cmd/reconciler serve), declared once for both.
const (
	// DefaultShutdownDelay is --shutdown-delay's: how long a daemon keeps
	// serving, with /readyz failing, after SIGTERM.
	DefaultShutdownDelay = 5 * time.Second
	// DefaultLogLevel is --log-level's.
	DefaultLogLevel = "info"
)
