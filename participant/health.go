package participant

import (
	"encoding/json"
	"net/http"

	"github.com/quotaplatform/quota/region"
)

// Health is what a readiness probe needs to know of a participant.
type Health struct {
	// Ready: the participant has started, is not closing, and has a
	// catalogue, read from NATS or loaded from the cache. A store outage
	// does not make it unready: it decides in degraded mode (Degraded).
	Ready bool `json:"ready"`
	// Reason says why it is not ready; empty when it is.
	Reason string `json:"reason,omitempty"`
	// CatalogueLoaded: the catalogue was read from NATS or the cache file.
	// CatalogueSynced: it was read from NATS since the start.
	CatalogueLoaded bool `json:"catalogue_loaded"`
	CatalogueSynced bool `json:"catalogue_synced"`
	// ConfigVersion is the catalogue bucket's revision last applied.
	ConfigVersion uint64 `json:"config_version"`
	// Breaker is the store circuit breaker's state; Degraded is true while
	// it is not closed.
	Breaker  string `json:"breaker"`
	Degraded bool   `json:"degraded"`
}

// Health reports the participant's readiness and why.
func (p *Participant) Health() Health {
	breaker := p.lim.Stats().Breaker
	h := Health{
		CatalogueLoaded: p.cat.Loaded(),
		CatalogueSynced: p.cat.Synced(),
		ConfigVersion:   p.cat.Version(),
		Breaker:         breaker.String(),
		Degraded:        breaker != region.BreakerClosed,
	}
	switch state := p.getState(); {
	case state == built:
		h.Reason = "not started"
	case state == starting:
		h.Reason = "starting"
	case state != started:
		h.Reason = "shutting down"
	case !h.CatalogueLoaded:
		h.Reason = "the catalogue has neither been read from NATS nor loaded from the cache yet"
	default:
		h.Ready = true
	}
	return h
}

// ReadyHandler answers a readiness probe: 200 when Health is ready, 503
// otherwise, with Health as a JSON body.
func (p *Participant) ReadyHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := p.Health()
		status := http.StatusOK
		if !h.Ready {
			status = http.StatusServiceUnavailable
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(h)
	})
}
