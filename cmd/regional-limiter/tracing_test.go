package main

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/quotaplatform/quota/internal/testserver"
)

// TestDaemonTraces: with --otlp-endpoint, a check that takes the slow path
// sends its store call's span in the caller's trace (traceparent), one
// without a traceparent sends none (a trace per store call cost 1.4 KB per
// check), a control-plane write and its push are spans, and the final
// report flush is one; every span reaches the collector by the time the
// daemon stopped.
func TestDaemonTraces(t *testing.T) {
	col := testserver.StartOTLPCollector(t)
	o := testOptions(t, "", "", t.TempDir())
	o.OTLPEndpoint = col.URL
	d := startDaemon(t, o)
	d.mustCall(t, "PUT", "/v1/limits/gold", `{"rate":10,"capacity":20}`, true, 204)

	const trace = "4bf92f3577b34da6a3ce929d0e0e4736"
	req, _ := http.NewRequest("POST", d.base+"/v1/allow", strings.NewReader(`{"key":"acct_traced","cost":1}`))
	req.Header.Set("traceparent", "00-"+trace+"-00f067aa0ba902b7-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("check: %s", resp.Status)
	}
	d.mustCall(t, "POST", "/v1/allow", `{"key":"acct_untraced","cost":1}`, false, 200)
	d.stop(t) // flushes the final reports, then the spans

	spans := map[string][]string{} // name → trace IDs
	for _, s := range col.Spans() {
		spans[s.Name] = append(spans[s.Name], s.TraceID)
	}
	if !slices.Contains(spans["quota.store.call"], trace) {
		t.Errorf("no quota.store.call span in the caller's trace: %v", spans)
	}
	for _, id := range spans["quota.store.call"] {
		if id != trace {
			t.Errorf("a quota.store.call span in trace %s, outside any caller's: %v", id, spans)
		}
	}
	for _, name := range []string{"quota.catalog.write", "quota.catalog.push", "quota.ledger.flush"} {
		if len(spans[name]) == 0 {
			t.Errorf("no %s span reached the collector: %v", name, spans)
		}
	}
}
