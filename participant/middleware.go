package participant

import (
	"net/http"

	"github.com/quotaplatform/quota/httplimit"
)

// Middleware is httplimit.Middleware on the participant: cfg.Limiter
// defaults to the participant's limiter (endpoint costs from the
// catalogue), cfg.Plans to its catalogue, cfg.Logger to its logger,
// cfg.Checks to its check-latency histogram (with Options.Registerer).
// Every other field keeps httplimit's defaults (the key from the X-API-Key
// header, the endpoint from the matched route).
func (p *Participant) Middleware(cfg httplimit.Config) (func(http.Handler) http.Handler, error) {
	if cfg.Limiter == nil {
		cfg.Limiter = p.lim
	}
	if cfg.Plans == nil {
		cfg.Plans = p.cat
	}
	if cfg.Logger == nil {
		cfg.Logger = p.log
	}
	if cfg.Checks == nil && p.checks != nil {
		cfg.Checks = p.checks
	}
	return httplimit.Middleware(cfg)
}
