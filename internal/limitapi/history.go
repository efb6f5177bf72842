package limitapi

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/time/rate"

	"github.com/quotaplatform/quota/bearer"
	"github.com/quotaplatform/quota/catalog"
)

// historyLimits rate-limits ?history=1 reads per caller, a caller being
// the bearer token it presents: one token bucket per configured read or
// admin token, built in New and never added to, so the map is read without
// a lock (rate.Limiter is safe for concurrent use). A request whose token
// is not configured (only possible for an API served without Guard) shares
// one bucket with every other such request.
type historyLimits struct {
	byToken map[[sha256.Size]byte]*rate.Limiter
	other   *rate.Limiter
	rate    rate.Limit
	burst   int
}

func newHistoryLimits(perSecond float64, burst int, tokens ...string) *historyLimits {
	h := &historyLimits{
		byToken: make(map[[sha256.Size]byte]*rate.Limiter, len(tokens)),
		other:   rate.NewLimiter(rate.Limit(perSecond), burst),
		rate:    rate.Limit(perSecond),
		burst:   burst,
	}
	for _, t := range tokens {
		if t != "" {
			h.byToken[sha256.Sum256([]byte(t))] = rate.NewLimiter(h.rate, burst)
		}
	}
	return h
}

// reserve takes one history read for the caller of r at now, or returns
// how long until it could; it takes nothing then.
func (h *historyLimits) reserve(r *http.Request, now time.Time) (wait time.Duration, ok bool) {
	lim := h.other
	if tok, has := bearer.FromHeader(r.Header.Get("Authorization")); has {
		if l, found := h.byToken[sha256.Sum256([]byte(tok))]; found {
			lim = l
		}
	}
	res := lim.ReserveN(now, 1)
	if !res.OK() {
		return time.Second, false
	}
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return d, false
	}
	return 0, true
}

func wantHistory(r *http.Request) bool {
	v := r.URL.Query().Get("history")
	return v == "1" || v == "true"
}

// history answers the revisions of one entry, at most Config.HistoryRate
// a second per caller (429 with Retry-After past it).
func (a *API) history(w http.ResponseWriter, r *http.Request, kind catalog.Kind, name string) {
	if wait, ok := a.historyLimits.reserve(r, time.Now()); !ok {
		secs := max(int64((wait+time.Second-1)/time.Second), 1)
		w.Header().Set("Retry-After", strconv.FormatInt(secs, 10))
		(&apiError{status: http.StatusTooManyRequests, field: "history",
			msg: fmt.Sprintf("too many history reads with this token: at most %g a second, %d at once; retry in %d s",
				float64(a.historyLimits.rate), a.historyLimits.burst, secs)}).write(w)
		return
	}
	h, err := a.cfg.Catalog.History(r.Context(), kind, name)
	switch {
	case errors.Is(err, catalog.ErrNotFound):
		(&apiError{status: http.StatusNotFound, field: string(kind), msg: err.Error()}).write(w)
	case err != nil:
		(&apiError{status: http.StatusServiceUnavailable, msg: "history cannot be read now (NATS unreachable)"}).write(w)
	default:
		writeJSON(w, http.StatusOK, map[string]any{"history": h})
	}
}
