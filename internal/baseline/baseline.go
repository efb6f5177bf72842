// Package baseline is the yardstick the daemon's check API is measured
// against: the floor of one check per HTTP/1.1 request, a bare net/http
// handler that decodes the same JSON with encoding/json and answers a fixed
// decision. cmd/regional-limiter's BenchmarkCheck runs it in process and
// `loadtest -serve-bare` serves it over loopback.
package baseline

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime/metrics"
)

// CheckHandler serves POST /v1/allow (a check body, answered with a fixed
// decision; 400 for a body that is not one), GET /readyz, and GET /metrics
// with the one counter the load test reads from any server it loads,
// go_memstats_alloc_bytes_total (as the Prometheus Go collector names the
// process's allocated bytes), so that the baseline's allocation per check
// is measured as the daemon's is.
func CheckHandler() http.Handler {
	answer := []byte(`{"allowed":true,"remaining":999,"limit":1000,"retry_after_ms":0,"reset_ms":1,"stale_ms":0,"degraded":false}` + "\n")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
		metrics.Read(s)
		fmt.Fprintf(w, "go_memstats_alloc_bytes_total %d\n", s[0].Value.Uint64())
	})
	mux.HandleFunc("POST /v1/allow", func(w http.ResponseWriter, r *http.Request) {
		var c struct {
			Key  string `json:"key"`
			Cost *int64 `json:"cost"`
		}
		dec := json.NewDecoder(r.Body)
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil || c.Key == "" {
			http.Error(w, "bad check", http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(answer)
	})
	return mux
}
