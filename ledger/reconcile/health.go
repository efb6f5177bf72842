package reconcile

import "sync"

// health is what Ready answers. Run's goroutine writes it; Ready reads it
// from any goroutine.
type health struct {
	mu         sync.Mutex
	consumeErr error // guarded by mu: why the Reconciler does not consume; nil while it does
	writeErr   error // guarded by mu: the last Store call's transient failure; nil after a success
}

// consuming records that the Reconciler consumes (err nil) or why not.
func (h *health) consuming(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.consumeErr = err
}

// wrote records the outcome of the last Store call: nil, or a transient
// failure.
func (h *health) wrote(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.writeErr = err
}

func (h *health) ready() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.consumeErr != nil {
		return h.consumeErr
	}
	return h.writeErr
}
