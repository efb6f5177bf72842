package limitapi

import (
	"context"
	"log/slog"

	"github.com/quotaplatform/quota/httplimit"
)

// logFailure logs an unexpected error at level. A limit key may be an API
// key, so key (when not "") is left out of err's message at level and
// logged, with the full message, at debug level only.
func (a *API) logFailure(level slog.Level, msg string, err error, key string) {
	if key == "" {
		a.log.Log(context.Background(), level, msg, "err", err)
		return
	}
	a.log.Log(context.Background(), level, msg, "err", httplimit.RedactKey(err, key))
	a.log.Debug(msg, "key", key, "err", err)
}
