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
	if qs := d.Quotas(); qs != nil {
		b = appendQuotas(b, d, qs)
	} else if d.QuotaRejected() {
		b = append(b, `,"quota_rejected":true`...)
	}
	if d.Replayed {
		// The check's request id was decided before: docs/design.md
		// [idempotency].
		b = append(b, `,"replayed":true`...)
	}
	return append(b, '}')
}

// appendQuotas appends the quota fields of a decision whose plan has
// quotas (docs/design.md [quotas]): the tightest constraint ("rate" for
// the bucket, or a quota's period), whether a quota refused the check,
// and every quota's limit, remaining and time to its period's end.
func appendQuotas(b []byte, d region.Decision, qs []region.QuotaStatus) []byte {
	b = append(b, `,"tightest":"`...)
	if t := d.Tightest(); t != "" {
		b = append(b, t...)
	} else {
		b = append(b, "rate"...)
	}
	b = append(b, '"')
	if d.QuotaRejected() {
		b = append(b, `,"quota_rejected":true`...)
	}
	b = append(b, `,"quota_remaining":[`...)
	now := time.Now()
	for i, q := range qs {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"period":"`...)
		b = append(b, q.Period...)
		b = append(b, `","limit":`...)
		b = strconv.AppendInt(b, q.Limit, 10)
		b = append(b, `,"remaining":`...)
		b = strconv.AppendInt(b, q.Remaining, 10)
		b = append(b, `,"reset_ms":`...)
		b = strconv.AppendInt(b, ceilMillis(q.End.Sub(now)), 10)
		b = append(b, '}')
	}
	return append(b, ']')
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
