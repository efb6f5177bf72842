package edge

import (
	"context"
	"net/http"
	"time"
)

// Secret is a flag value that never prints itself: not in -help, not in %v
// or %#v of an options struct, not in a flag parser's "invalid value"
// errors (Set never fails; the value is checked after parsing).
type Secret string

// Set implements flag.Value.
func (s *Secret) Set(v string) error { *s = Secret(v); return nil }

// String implements flag.Value: "<redacted>", or "" when unset.
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "<redacted>"
}

// GoString is String, so that %#v hides the secret too.
func (s Secret) GoString() string { return s.String() }

// StopHTTP stops srv gracefully once its shutdown delay has passed: the
// caller has already made its readiness fail, so load balancers move
// traffic away while srv still answers. It waits delay (or until ctx
// ends), then shuts srv down, waiting for requests in flight, closes it
// hard if ctx ends first, and waits for done, closed when srv's Serve
// returns.
func StopHTTP(ctx context.Context, srv *http.Server, delay time.Duration, done <-chan struct{}) error {
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	err := srv.Shutdown(ctx)
	if err != nil {
		_ = srv.Close()
	}
	<-done
	return err
}
