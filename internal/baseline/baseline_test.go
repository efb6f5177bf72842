package baseline

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The bare baseline answers a check and refuses a body that is not one.
func TestCheckHandler(t *testing.T) {
	srv := httptest.NewServer(CheckHandler())
	defer srv.Close()
	for _, tt := range []struct {
		body string
		want int
	}{
		{`{"key":"k","cost":1}`, http.StatusOK},
		{`{"key":""}`, http.StatusBadRequest},
		{`{"key":"k","extra":1}`, http.StatusBadRequest},
	} {
		resp, err := http.Post(srv.URL+"/v1/allow", "application/json", strings.NewReader(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s: status %d, want %d", tt.body, resp.StatusCode, tt.want)
		}
	}
}

// The baseline counts its allocated bytes under the daemon's metric name,
// and the count grows with the checks it answers.
func TestAllocatedBytes(t *testing.T) {
	srv := httptest.NewServer(CheckHandler())
	defer srv.Close()
	read := func() uint64 {
		t.Helper()
		resp, err := http.Get(srv.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var name string
		var v uint64
		if _, err := fmt.Fscan(resp.Body, &name, &v); err != nil || name != "go_memstats_alloc_bytes_total" {
			t.Fatalf("metrics: %q %d, %v", name, v, err)
		}
		return v
	}
	before := read()
	for range 100 {
		resp, err := http.Post(srv.URL+"/v1/allow", "application/json", strings.NewReader(`{"key":"k","cost":1}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	if after := read(); after <= before {
		t.Fatalf("allocated bytes went from %d to %d over 100 checks", before, after)
	}
}
