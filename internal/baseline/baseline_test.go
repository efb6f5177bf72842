package baseline

import (
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
