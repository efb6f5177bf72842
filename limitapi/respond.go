package limitapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/quotaplatform/quota/region"
)

// appendDecision appends d as the check API's JSON object.
func appendDecision(b []byte, d region.Decision) []byte {
	b = append(b, `{"allowed":`...)
	b = strconv.AppendBool(b, d.Allowed)
	b = append(b, `,"remaining":`...)
	b = strconv.AppendInt(b, d.Remaining, 10)
	b = append(b, `,"limit":`...)
	b = strconv.AppendInt(b, d.Limit, 10)
	b = append(b, `,"retry_after_ms":`...)
	retry := ceilMillis(d.RetryAfter)
	if !d.Allowed {
		retry = max(retry, 1)
	}
	b = strconv.AppendInt(b, retry, 10)
	b = append(b, `,"reset_ms":`...)
	b = strconv.AppendInt(b, ceilMillis(d.Reset), 10)
	b = append(b, `,"stale_ms":`...)
	b = strconv.AppendInt(b, d.Stale.Milliseconds(), 10)
	b = append(b, `,"degraded":`...)
	b = strconv.AppendBool(b, d.Degraded)
	if d.Degraded {
		// Which failure policy decided: docs/design.md [plan-semantics].
		b = append(b, `,"failure_policy":"`...)
		b = append(b, d.FailurePolicy()...)
		b = append(b, '"')
	}
	if d.ShadowRejected {
		b = append(b, `,"shadow_rejected":true`...)
	}
	if d.Replayed {
		// The check's request id was decided before: docs/design.md
		// [idempotency].
		b = append(b, `,"replayed":true`...)
	}
	return append(b, '}')
}

func ceilMillis(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// writeJSON answers status with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		writeRaw(w, http.StatusInternalServerError, []byte(`{"error":"cannot encode the answer"}`+"\n"))
		return
	}
	writeRaw(w, status, buf.Bytes())
}

// contentTypeJSON is shared by every answer; its capacity of one makes an
// Add by a later handler copy it rather than write into it.
var contentTypeJSON = []string{"application/json"}

func writeRaw(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	h["Content-Type"] = contentTypeJSON
	w.WriteHeader(status)
	w.Write(b)
}
