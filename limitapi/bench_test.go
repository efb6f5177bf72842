package limitapi_test

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/quotaplatform/quota/region"
)

func BenchmarkAllow(b *testing.B) {
	h, cat := newAPI(b, true)
	cat.plans["default"] = region.Plan{Rate: 1e9, Capacity: 1e9}
	body := []byte(`{"key":"acct_1","cost":1}`)
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest("POST", "/v1/allow", bytes.NewReader(body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
	}
}

func BenchmarkAllowBatch100(b *testing.B) {
	h, cat := newAPI(b, true)
	cat.plans["default"] = region.Plan{Rate: 1e9, Capacity: 1e9}
	var sb strings.Builder
	sb.WriteString(`{"checks":[`)
	for i := range 100 {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"key":"acct_%d","cost":1}`, i)
	}
	sb.WriteString(`]}`)
	body := []byte(sb.String())
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest("POST", "/v1/allow/batch", bytes.NewReader(body))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "decisions/s")
}

// BenchmarkAllowCheckToken is BenchmarkAllow behind a check token (two
// configured, the second presented): the token check hashes and compares.
func BenchmarkAllowCheckToken(b *testing.B) {
	h, cat, _ := newAPIWithConfig(b, true, nil, withTokens)
	cat.plans["default"] = region.Plan{Rate: 1e9, Capacity: 1e9}
	body := []byte(`{"key":"acct_1","cost":1}`)
	b.ReportAllocs()
	for b.Loop() {
		r := httptest.NewRequest("POST", "/v1/allow", bytes.NewReader(body))
		r.Header.Set("Authorization", "Bearer "+checkNew)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
	}
}
