package region

import (
	"sync"
	"sync/atomic"
)

// clockOffset is the store's clock minus the local wall clock, learned from
// lease replies (docs/design.md [store-clock]): no extra round trip. It is a
// clock offset, not a timestamp, so it stays valid across a descheduled
// process.
type clockOffset struct {
	v atomic.Int64 // nanoseconds; read on the decision path

	mu   sync.Mutex
	seen bool    // guarded by mu
	ewma float64 // guarded by mu
}

// offsetAlpha smooths samples, whose error is up to half a round trip.
const offsetAlpha = 0.2

func (o *clockOffset) get() int64 { return o.v.Load() }

func (o *clockOffset) observe(sample int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.seen {
		o.ewma, o.seen = float64(sample), true
	} else {
		o.ewma += offsetAlpha * (float64(sample) - o.ewma)
	}
	o.v.Store(int64(o.ewma))
}
