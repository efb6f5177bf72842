package ledger

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/quotaplatform/quota/region/store"
)

// Usage messages come in two encodings, told apart by the HeaderEncoding
// header of the JetStream message:
//
//   - no header: one Report as JSON (Report.Encode), as limiters before
//     batching sent, so a rolling upgrade loses nothing;
//   - EncodingBatch: many reports of one region and one publishing process
//     in the compact binary form of EncodeBatch, gzip-compressed.
//
// Batches change nothing in how usage is counted: every report in them is
// still cumulative with its own Seq, so the consumer applies a batch report
// by report, and a redelivered, reordered or duplicated batch is as
// harmless as a single report.
const (
	// HeaderEncoding is the message header naming the body's encoding.
	HeaderEncoding = "Quota-Encoding"
	// HeaderReports is the number of reports in a batch message, so that a
	// consumer can size its batches before decoding. Advisory: the body is
	// what counts.
	HeaderReports = "Quota-Reports"
	// EncodingBatch is HeaderEncoding's value for EncodeBatch bodies.
	EncodingBatch = "batch-v1+gzip"
	// EncodingJSON names the single-report encoding in Config.Encoding; it
	// is sent without a header.
	EncodingJSON = "json"
)

// Batch bounds. A batch's uncompressed body stays under MaxBatchBytes so
// that, compressed, it is always below NATS' default max_payload (1 MiB);
// decoders refuse anything larger, which also bounds what a hostile
// compressed body can expand to.
const (
	// MaxBatchBytes bounds a batch's uncompressed body.
	MaxBatchBytes = 768 << 10
	// MaxBatchReports bounds the reports in one batch.
	MaxBatchReports = 8192
)

// batchMagic starts every uncompressed batch body; its last byte is the
// format version.
var batchMagic = [...]byte{'Q', 'U', 'B', 1}

// Per-report flags of the batch format.
const (
	flagFinal       = 1 << 0
	flagOwnProcess  = 1 << 1 // the report's ProcessID follows (it differs from the batch's)
	flagWouldReject = 1 << 2 // a WouldReject count follows
	flagRefunded    = 1 << 3 // a Refunded count follows
	flagCharged     = 1 << 4 // a Charged count follows
	knownFlags      = flagFinal | flagOwnProcess | flagWouldReject | flagRefunded | flagCharged
)

// ErrBatchMixed is returned by EncodeBatch for reports that do not share one
// region and one publishing process (Stream.Subject).
var ErrBatchMixed = errors.New("ledger: batch reports must share region and publishing process")

// batchEncoder appends one batch body; its buffers are reused.
type batchEncoder struct {
	raw bytes.Buffer
	zip bytes.Buffer
	zw  *gzip.Writer
	tmp [binary.MaxVarintLen64]byte
}

var encoders = sync.Pool{New: func() any {
	e := &batchEncoder{}
	e.zw, _ = gzip.NewWriterLevel(&e.zip, gzip.BestSpeed)
	return e
}}

func (e *batchEncoder) uvarint(v uint64) { e.raw.Write(e.tmp[:binary.PutUvarint(e.tmp[:], v)]) }
func (e *batchEncoder) varint(v int64)   { e.raw.Write(e.tmp[:binary.PutVarint(e.tmp[:], v)]) }
func (e *batchEncoder) str(s string)     { e.uvarint(uint64(len(s))); e.raw.WriteString(s) }

// EncodeBatch returns the compressed body of a batch of reports and its
// message ID. Every report must have the region of the first and be
// published on the first's subject process (its ProcessID, or that
// process's late rows: see StreamConfig.Subject); the caller splits reports
// into batches of at most MaxBatchReports and MaxBatchBytes (see
// SplitBatches). The message ID is the publishing process and a hash of
// the uncompressed body, so the same reports sent twice in one flush (a
// retry) are dropped by the stream's duplicate window.
func EncodeBatch(reps []Report) (body []byte, msgID string, err error) {
	if len(reps) == 0 || len(reps) > MaxBatchReports {
		return nil, "", fmt.Errorf("ledger: batch of %d reports, want 1 to %d", len(reps), MaxBatchReports)
	}
	region, process := reps[0].Region, subjectProcess(reps[0].ProcessID)
	e := encoders.Get().(*batchEncoder)
	defer encoders.Put(e)
	e.raw.Reset()
	e.raw.Write(batchMagic[:])
	e.str(region)
	e.str(process)
	sentAt := reps[0].SentAt.UnixNano()
	e.varint(sentAt)
	e.uvarint(uint64(len(reps)))
	for i := range reps {
		r := &reps[i]
		if r.Region != region || subjectProcess(r.ProcessID) != process {
			return nil, "", fmt.Errorf("%w: report %d is %s/%s, the batch is %s/%s", ErrBatchMixed, i, r.Region, r.ProcessID, region, process)
		}
		e.str(r.Key)
		e.varint(r.WindowStart.UnixNano())
		e.varint(r.WindowEnd.UnixNano() - r.WindowStart.UnixNano())
		e.varint(r.Spent)
		e.varint(r.Leased)
		e.varint(r.Rejected)
		e.varint(r.Degraded)
		e.varint(r.Seq)
		e.varint(r.SentAt.UnixNano() - sentAt)
		var flags byte
		if r.Final {
			flags |= flagFinal
		}
		if r.ProcessID != process {
			flags |= flagOwnProcess
		}
		if r.WouldReject != 0 {
			flags |= flagWouldReject
		}
		if r.Refunded != 0 {
			flags |= flagRefunded
		}
		if r.Charged != 0 {
			flags |= flagCharged
		}
		e.raw.WriteByte(flags)
		if flags&flagOwnProcess != 0 {
			e.str(r.ProcessID)
		}
		if flags&flagWouldReject != 0 {
			e.varint(r.WouldReject)
		}
		// Refunds and charges (docs/design.md [idempotency]) are flagged
		// counts after the others, so that a batch without them is the
		// batch an older encoder wrote, and an older batch decodes with
		// both zero.
		if flags&flagRefunded != 0 {
			e.varint(r.Refunded)
		}
		if flags&flagCharged != 0 {
			e.varint(r.Charged)
		}
	}
	if e.raw.Len() > MaxBatchBytes {
		return nil, "", fmt.Errorf("ledger: batch body of %d bytes exceeds %d", e.raw.Len(), MaxBatchBytes)
	}
	sum := sha256.Sum256(e.raw.Bytes())
	e.zip.Reset()
	e.zw.Reset(&e.zip)
	if _, err := e.zw.Write(e.raw.Bytes()); err != nil {
		return nil, "", fmt.Errorf("ledger: compress batch: %w", err)
	}
	if err := e.zw.Close(); err != nil {
		return nil, "", fmt.Errorf("ledger: compress batch: %w", err)
	}
	return bytes.Clone(e.zip.Bytes()), process + "|b|" + hex.EncodeToString(sum[:12]), nil
}

// batchReportBytes bounds the uncompressed size of one report in a batch:
// its key and its length, eleven numbers and the flags, and its own
// process ID when it has one.
func batchReportBytes(r *Report) int {
	n := len(r.Key) + binary.MaxVarintLen16 + 11*binary.MaxVarintLen64 + 1
	if r.ProcessID != subjectProcess(r.ProcessID) {
		n += len(r.ProcessID) + binary.MaxVarintLen16
	}
	return n
}

// SplitBatches groups reports by region and publishing process (their
// subject), keeping their order within a group, and cuts each group into
// batches that EncodeBatch takes. When every report shares one group (a
// process's own reports, the usual flush) the batches are slices of reps,
// not copies.
func SplitBatches(reps []Report) [][]Report {
	type group struct{ region, process string }
	if len(reps) == 0 {
		return nil
	}
	first := group{reps[0].Region, subjectProcess(reps[0].ProcessID)}
	one := true
	for i := 1; i < len(reps) && one; i++ {
		one = reps[i].Region == first.region && subjectProcess(reps[i].ProcessID) == first.process
	}
	if one {
		return cutBatches(nil, reps, first.region, first.process)
	}
	var order []group
	groups := make(map[group][]Report)
	for _, r := range reps {
		g := group{r.Region, subjectProcess(r.ProcessID)}
		if _, ok := groups[g]; !ok {
			order = append(order, g)
		}
		groups[g] = append(groups[g], r)
	}
	var out [][]Report
	for _, g := range order {
		out = cutBatches(out, groups[g], g.region, g.process)
	}
	return out
}

// cutBatches appends to out the batches of one group's reports, each
// within MaxBatchReports and MaxBatchBytes.
func cutBatches(out [][]Report, rs []Report, region, process string) [][]Report {
	header := 4 + len(region) + len(process) + 4*binary.MaxVarintLen64
	for len(rs) > 0 {
		n, size := 0, header
		for n < len(rs) && n < MaxBatchReports && size+batchReportBytes(&rs[n]) <= MaxBatchBytes {
			size += batchReportBytes(&rs[n])
			n++
		}
		out = append(out, rs[:n:n])
		rs = rs[n:]
	}
	return out
}

// Decoded is one report of a message: its place in the message, and Err
// when it fails Report.Validate (the report is then only for a dead letter).
type Decoded struct {
	Index  int
	Report Report
	Err    error
}

// DecodeReports parses a usage message's body in the given encoding (the
// HeaderEncoding header; "" for a single JSON report) and returns every
// report in message order, each valid or with its error. An error
// (wrapping ErrInvalidReport) means the body as a whole could not be read:
// an unknown encoding, a corrupt or truncated batch, or, for a single JSON
// report, one that is invalid.
func DecodeReports(encoding string, data []byte) ([]Decoded, error) {
	switch encoding {
	case "":
		r, err := DecodeReport(data)
		if err != nil {
			return nil, err
		}
		return []Decoded{{Report: r}}, nil
	case EncodingBatch:
		return decodeBatch(data)
	default:
		return nil, fmt.Errorf("%w: unknown encoding %q (header %s)", ErrInvalidReport, encoding, HeaderEncoding)
	}
}

// DecodeMessage parses a usage message's body and fails when any report in
// it is invalid. Tools and tests use it; the reconciler uses DecodeReports
// so that one bad report does not stop the good ones of its batch.
func DecodeMessage(encoding string, data []byte) ([]Report, error) {
	decoded, err := DecodeReports(encoding, data)
	if err != nil {
		return nil, err
	}
	reps := make([]Report, len(decoded))
	for i, d := range decoded {
		if d.Err != nil {
			return nil, fmt.Errorf("report %d of the batch: %w", d.Index, d.Err)
		}
		reps[i] = d.Report
	}
	return reps, nil
}

var gzipReaders sync.Pool // *gzip.Reader

// decodeBatch reads an EncodeBatch body.
func decodeBatch(data []byte) ([]Decoded, error) {
	raw, err := gunzip(data)
	if err != nil {
		return nil, err
	}
	d := batchDecoder{b: raw}
	if !bytes.HasPrefix(d.b, batchMagic[:]) {
		return nil, fmt.Errorf("%w: batch: not a version %d batch", ErrInvalidReport, batchMagic[3])
	}
	d.b = d.b[len(batchMagic):]
	region, process := d.str(MaxIDLen), d.str(MaxIDLen)
	sentAt := d.varint()
	n := d.uvarint()
	// A report takes at least 11 bytes.
	if d.err == nil && n > uint64(min(MaxBatchReports, len(d.b)/11)) {
		d.fail("count %d does not fit the body", n)
	}
	var out []Decoded
	if d.err == nil {
		out = make([]Decoded, 0, n)
	}
	for i := 0; d.err == nil && uint64(i) < n; i++ {
		r := Report{Region: region, ProcessID: process}
		r.Key = d.str(store.MaxKeyLen)
		start := d.varint()
		length := d.varint()
		r.Spent, r.Leased, r.Rejected, r.Degraded, r.Seq = d.varint(), d.varint(), d.varint(), d.varint(), d.varint()
		sent := d.varint()
		flags := d.byte()
		if flags&^knownFlags != 0 {
			d.fail("report %d: unknown flags %#x", i, flags)
		}
		r.Final = flags&flagFinal != 0
		if flags&flagOwnProcess != 0 {
			r.ProcessID = d.str(MaxIDLen)
		}
		if flags&flagWouldReject != 0 {
			r.WouldReject = d.varint()
		}
		if flags&flagRefunded != 0 {
			r.Refunded = d.varint()
		}
		if flags&flagCharged != 0 {
			r.Charged = d.varint()
		}
		if d.err != nil {
			break
		}
		end, ok1 := addNanos(start, length)
		at, ok2 := addNanos(sentAt, sent)
		if !ok1 || !ok2 {
			d.fail("report %d: times overflow", i)
			break
		}
		r.WindowStart, r.WindowEnd, r.SentAt = time.Unix(0, start).UTC(), time.Unix(0, end).UTC(), time.Unix(0, at).UTC()
		err := r.Validate()
		if err == nil && subjectProcess(r.ProcessID) != process {
			err = fmt.Errorf("%w: process_id: %q is not published by %q", ErrInvalidReport, r.ProcessID, process)
		}
		out = append(out, Decoded{Index: i, Report: r, Err: err})
	}
	if d.err == nil && len(d.b) != 0 {
		d.fail("%d bytes after the last report", len(d.b))
	}
	if d.err != nil {
		return nil, d.err
	}
	return out, nil
}

func addNanos(a, b int64) (int64, bool) {
	s := a + b
	if (b > 0 && s < a) || (b < 0 && s > a) {
		return 0, false
	}
	return s, true
}

// gunzip decompresses a batch, refusing more than MaxBatchBytes.
func gunzip(data []byte) ([]byte, error) {
	zr, _ := gzipReaders.Get().(*gzip.Reader)
	var err error
	if zr == nil {
		zr, err = gzip.NewReader(bytes.NewReader(data))
	} else {
		err = zr.Reset(bytes.NewReader(data))
	}
	if err != nil {
		return nil, fmt.Errorf("%w: batch: %v", ErrInvalidReport, err)
	}
	defer gzipReaders.Put(zr)
	raw, err := io.ReadAll(io.LimitReader(zr, MaxBatchBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: batch: %v", ErrInvalidReport, err)
	}
	if len(raw) > MaxBatchBytes {
		return nil, fmt.Errorf("%w: batch: more than %d bytes uncompressed", ErrInvalidReport, MaxBatchBytes)
	}
	return raw, nil
}

// batchDecoder reads a batch body; the first error sticks and later reads
// return zero values.
type batchDecoder struct {
	b   []byte
	err error
}

func (d *batchDecoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: batch: %s", ErrInvalidReport, fmt.Sprintf(format, args...))
	}
}

func (d *batchDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("truncated or overlong number")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *batchDecoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("truncated or overlong number")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *batchDecoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if len(d.b) == 0 {
		d.fail("truncated")
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

// str reads a length-prefixed string of at most max bytes.
func (d *batchDecoder) str(max int) string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(max) || n > uint64(len(d.b)) {
		d.fail("string of %d bytes (at most %d, %d left)", n, max, len(d.b))
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

// subjectProcess is the process a report is published under: its
// ProcessID without a late row's suffix (see StreamConfig.Subject).
func subjectProcess(process string) string {
	if i := strings.Index(process, lateMark); i >= 0 {
		return process[:i]
	}
	return process
}
