package region_test

import (
	"time"

	"github.com/quotaplatform/quota/internal/testclock"
)

func newManualClock() *testclock.Manual { return testclock.New(time.Now().Truncate(time.Second)) }

// skewedClock is the system clock shifted by a fixed amount, keeping the
// monotonic reading, like a host whose wall clock is off.
type skewedClock struct{ skew time.Duration }

func (c skewedClock) Now() time.Time { return time.Now().Add(c.skew) }
