// Package baseline is the yardstick the daemon's check API is measured
// against: the floor of one check per HTTP/1.1 request, a bare net/http
// handler that decodes the same JSON with encoding/json and answers a fixed
// decision. cmd/regional-limiter's BenchmarkCheck runs it in process and
// `loadtest -serve-bare` serves it over loopback.
package baseline

import (
	"encoding/json"
	"net/http"
)

// CheckHandler serves POST /v1/allow (a check body, answered with a fixed
// decision; 400 for a body that is not one) and GET /readyz.
func CheckHandler() http.Handler {
	answer := []byte(`{"allowed":true,"remaining":999,"limit":1000,"retry_after_ms":0,"reset_ms":1,"stale_ms":0,"degraded":false}` + "\n")
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
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
