package limitmetrics

import (
	"maps"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// HTTP counts and times the requests of an http.Handler by route (the
// matched ServeMux pattern) and status code. Create it with NewHTTP,
// register it, and wrap the handler with Wrap.
type HTTP struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec

	// series caches the children of requests and duration by route and
	// code, so that a request looks them up without building label values
	// (a lookup by label values allocates). Read without a lock; replaced
	// under mu, copied, when a route and code are first seen.
	series atomic.Pointer[map[seriesKey]*series]
	mu     sync.Mutex
}

type seriesKey struct {
	route string
	code  int
}

type series struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

// maxCachedSeries bounds the cache: routes are the mux's patterns and
// codes the handlers', so it is not reached in practice; past it, series
// are looked up by label values as they were before the cache.
const maxCachedSeries = 4096

// NewHTTP returns the HTTP metrics quota_http_requests_total{route,code}
// and quota_http_request_duration_seconds{route}.
func NewHTTP() *HTTP {
	m := &HTTP{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "quota_http_requests_total", Help: "HTTP requests served, by route and status code.",
		}, []string{"route", "code"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "quota_http_request_duration_seconds",
			Help:    "Time to serve an HTTP request, by route.",
			Buckets: []float64{100e-6, 250e-6, 500e-6, 1e-3, 2e-3, 5e-3, 10e-3, 25e-3, 100e-3, 1},
		}, []string{"route"}),
	}
	m.series.Store(&map[seriesKey]*series{})
	return m
}

// seriesOf returns the series of route and code.
func (m *HTTP) seriesOf(route string, code int) *series {
	k := seriesKey{route, code}
	if s, ok := (*m.series.Load())[k]; ok {
		return s
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	old := *m.series.Load()
	if s, ok := old[k]; ok {
		return s
	}
	s := &series{
		requests: m.requests.WithLabelValues(route, strconv.Itoa(code)),
		duration: m.duration.WithLabelValues(route),
	}
	if len(old) < maxCachedSeries {
		next := make(map[seriesKey]*series, len(old)+1)
		maps.Copy(next, old)
		next[k] = s
		m.series.Store(&next)
	}
	return s
}

// Describe implements prometheus.Collector.
func (m *HTTP) Describe(ch chan<- *prometheus.Desc) {
	m.requests.Describe(ch)
	m.duration.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *HTTP) Collect(ch chan<- prometheus.Metric) {
	m.requests.Collect(ch)
	m.duration.Collect(ch)
}

// Wrap returns next, counted and timed. The route is the ServeMux pattern
// that matched (set on the request by the mux inside next), or "unmatched".
// It allocates nothing per request once a route and code have been seen.
func (m *HTTP) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		t0 := time.Now()
		sw := statusWriters.Get().(*statusWriter)
		sw.ResponseWriter, sw.status = w, http.StatusOK
		next.ServeHTTP(sw, r)
		status := sw.status
		// next has returned: the writer is no longer used (a handler may
		// not use its ResponseWriter after ServeHTTP returns).
		sw.ResponseWriter = nil
		statusWriters.Put(sw)
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		s := m.seriesOf(route, status)
		s.requests.Inc()
		s.duration.Observe(time.Since(t0).Seconds())
	})
}

// statusWriters holds the statusWriters of Wrap between requests.
var statusWriters = sync.Pool{New: func() any { return new(statusWriter) }}

// statusWriter remembers the status code written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	s.status = code
	s.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
