package gossip

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/quotaplatform/quota/region/store"
)

// Digest wire format, version 1. All integers are unsigned varints, all
// rates float32 bits, little-endian:
//
//	magic "QG" | version (1 byte) | flags (1 byte, bit 0: goodbye)
//	region (len, bytes) | process (len, bytes) | epoch
//	demand | admitted | learned                 (process totals, cost units/s)
//	key count | key count × (key (len, bytes) | demand | admitted | age)
//
// A decoder rejects unknown versions, unknown flags, names and keys that are
// empty, too long or not printable ASCII, negative or non-finite rates,
// repeated keys and trailing bytes.
const (
	// DigestVersion is the version this package writes and reads.
	DigestVersion = 1
	// MaxDigestSize is the largest digest a decoder accepts and the ceiling
	// of Config.MaxDigestBytes.
	MaxDigestSize = 64 << 10
	// MaxNameLen is the longest region or process name, in bytes.
	MaxNameLen = 64

	flagGoodbye = 1 << 0
	headerLen   = 4
)

// ErrBadDigest is wrapped by every decoding error.
var ErrBadDigest = errors.New("gossip: bad digest")

// Digest is what one process publishes each interval.
type Digest struct {
	Region  string
	Process string
	// Epoch is the tick index: the publisher's clock divided by the interval.
	Epoch uint64
	// Goodbye says the process is leaving; it carries no keys.
	Goodbye bool
	// Demand and Admitted are the process's smoothed totals over all keys,
	// cost units per second.
	Demand, Admitted float64
	// Learned is the process's long-horizon average of total demand, from
	// which region weights are learned.
	Learned float64
	// Keys are the keys with most demand, most first.
	Keys []KeyDemand
}

// KeyDemand is one key's smoothed demand and admitted cost at one process,
// cost units per second.
type KeyDemand struct {
	Key              string
	Demand, Admitted float64
	// Age is how many epochs the process has been publishing the key,
	// capped at MaxKeyAge.
	Age uint64
}

// MaxKeyAge caps KeyDemand.Age.
const MaxKeyAge = 1 << 16

// encode appends d to b, with as many of d.Keys (in order) as fit in max
// bytes, and returns the buffer and the number of keys written.
func (d *Digest) encode(b []byte, max int) ([]byte, int, error) {
	if err := checkName("region", d.Region); err != nil {
		return b, 0, err
	}
	if err := checkName("process", d.Process); err != nil {
		return b, 0, err
	}
	var flags byte
	if d.Goodbye {
		flags |= flagGoodbye
	}
	start := len(b)
	b = append(b, 'Q', 'G', DigestVersion, flags)
	b = appendString(b, d.Region)
	b = appendString(b, d.Process)
	b = binary.AppendUvarint(b, d.Epoch)
	b = appendRate(b, d.Demand)
	b = appendRate(b, d.Admitted)
	b = appendRate(b, d.Learned)
	// The key count comes before the keys; reserve its room for the most
	// keys that could fit, then write the real count.
	room := max - (len(b) - start) - binary.MaxVarintLen32
	var body []byte
	n := 0
	for _, k := range d.Keys {
		if checkKey(k.Key) != nil {
			continue
		}
		age := min(k.Age, MaxKeyAge)
		need := uvarintLen(uint64(len(k.Key))) + len(k.Key) + 8 + uvarintLen(age)
		if len(body)+need > room {
			break
		}
		body = appendString(body, k.Key)
		body = appendRate(body, k.Demand)
		body = appendRate(body, k.Admitted)
		body = binary.AppendUvarint(body, age)
		n++
	}
	b = binary.AppendUvarint(b, uint64(n))
	b = append(b, body...)
	return b, n, nil
}

// MarshalBinary encodes d in the wire format (encoding.BinaryMarshaler),
// with as many of its keys, in order, as fit in MaxDigestSize; a key that
// is not printable ASCII of 1 to store.MaxKeyLen bytes is left out. It fails
// only on a bad region or process name. A Node publishes its own digests;
// this is for tools and tests that speak the protocol.
func (d *Digest) MarshalBinary() ([]byte, error) {
	b, _, err := d.encode(nil, MaxDigestSize)
	return b, err
}

// DecodeDigest parses one digest. It never panics; anything malformed is an
// error wrapping ErrBadDigest.
func DecodeDigest(b []byte) (Digest, error) {
	var d Digest
	if len(b) > MaxDigestSize {
		return d, fmt.Errorf("%w: %d bytes, more than %d", ErrBadDigest, len(b), MaxDigestSize)
	}
	if len(b) < headerLen || b[0] != 'Q' || b[1] != 'G' {
		return d, fmt.Errorf("%w: no magic", ErrBadDigest)
	}
	if b[2] != DigestVersion {
		return d, fmt.Errorf("%w: version %d, want %d", ErrBadDigest, b[2], DigestVersion)
	}
	if b[3]&^flagGoodbye != 0 {
		return d, fmt.Errorf("%w: unknown flags %#x", ErrBadDigest, b[3])
	}
	d.Goodbye = b[3]&flagGoodbye != 0
	r := reader{b: b[headerLen:]}
	d.Region = r.str("region", MaxNameLen)
	d.Process = r.str("process", MaxNameLen)
	d.Epoch = r.uvarint("epoch")
	d.Demand = r.rate("demand")
	d.Admitted = r.rate("admitted")
	d.Learned = r.rate("learned")
	n := r.uvarint("key count")
	if r.err == nil && n > uint64(len(r.b))/11 { // a key entry is at least 11 bytes
		r.fail("key count %d does not fit in %d bytes", n, len(r.b))
	}
	if r.err == nil && n > 0 {
		d.Keys = make([]KeyDemand, 0, n)
		seen := make(map[string]struct{}, n)
		for i := uint64(0); i < n && r.err == nil; i++ {
			k := KeyDemand{Key: r.str("key", store.MaxKeyLen)}
			k.Demand = r.rate("key demand")
			k.Admitted = r.rate("key admitted")
			k.Age = r.uvarint("key age")
			if r.err == nil && k.Age > MaxKeyAge {
				r.fail("key age %d above %d", k.Age, MaxKeyAge)
			}
			if _, dup := seen[k.Key]; dup && r.err == nil {
				r.fail("key %d repeated (keys are not quoted in errors)", i)
			}
			seen[k.Key] = struct{}{}
			d.Keys = append(d.Keys, k)
		}
	}
	if r.err == nil && len(r.b) != 0 {
		r.fail("%d trailing bytes", len(r.b))
	}
	if r.err == nil {
		if err := checkName("region", d.Region); err != nil {
			r.fail("%v", err)
		} else if err := checkName("process", d.Process); err != nil {
			r.fail("%v", err)
		}
	}
	if r.err != nil {
		return Digest{}, r.err
	}
	return d, nil
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: "+format, append([]any{ErrBadDigest}, args...)...)
	}
}

func (r *reader) uvarint(field string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail("%s: bad varint", field)
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) str(field string, max int) string {
	n := r.uvarint(field + " length")
	if r.err != nil {
		return ""
	}
	if n == 0 || n > uint64(max) || n > uint64(len(r.b)) {
		r.fail("%s: length %d out of range", field, n)
		return ""
	}
	s := r.b[:n]
	for _, c := range s {
		if c < 0x21 || c > 0x7e {
			r.fail("%s: byte %#x is not printable ASCII", field, c)
			return ""
		}
	}
	r.b = r.b[n:]
	return string(s)
}

func (r *reader) rate(field string) float64 {
	if r.err != nil {
		return 0
	}
	if len(r.b) < 4 {
		r.fail("%s: short", field)
		return 0
	}
	v := float64(math.Float32frombits(binary.LittleEndian.Uint32(r.b)))
	r.b = r.b[4:]
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		r.fail("%s: %v is not a finite rate ≥ 0", field, v)
		return 0
	}
	return v
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendRate(b []byte, v float64) []byte {
	return binary.LittleEndian.AppendUint32(b, math.Float32bits(float32(wireRate(v))))
}

// wireRate is v as the wire carries it: a float32 in [0, MaxFloat32].
func wireRate(v float64) float64 {
	if math.IsNaN(v) || v < 0 {
		v = 0
	}
	if v > math.MaxFloat32 {
		v = math.MaxFloat32
	}
	return float64(float32(v))
}

// toWire rounds d's numbers to what the wire carries, so that a process
// counts its own digest exactly as every other process decodes it (and
// knows its own echo from a forgery).
func (d *Digest) toWire() {
	d.Demand, d.Admitted, d.Learned = wireRate(d.Demand), wireRate(d.Admitted), wireRate(d.Learned)
	keys := d.Keys[:0]
	for _, k := range d.Keys {
		if checkKey(k.Key) != nil {
			continue // encode leaves it out
		}
		k.Demand, k.Admitted, k.Age = wireRate(k.Demand), wireRate(k.Admitted), min(k.Age, MaxKeyAge)
		keys = append(keys, k)
	}
	d.Keys = keys
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

// checkName: region and process names are NATS subject tokens, so besides
// being printable they hold no '.', '*' or '>'.
func checkName(field, s string) error {
	if s == "" || len(s) > MaxNameLen {
		return fmt.Errorf("gossip: %s %q must be 1 to %d bytes", field, s, MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x21 || c > 0x7e || c == '.' || c == '*' || c == '>' {
			return fmt.Errorf("gossip: %s %q holds %q; use printable ASCII without '.', '*', '>'", field, s, c)
		}
	}
	return nil
}

func checkKey(s string) error {
	if s == "" || len(s) > store.MaxKeyLen {
		return fmt.Errorf("gossip: key must be 1 to %d bytes", store.MaxKeyLen)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return fmt.Errorf("gossip: key byte %#x is not printable ASCII", s[i])
		}
	}
	return nil
}
