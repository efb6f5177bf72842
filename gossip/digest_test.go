package gossip

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestDigestRoundTrip(t *testing.T) {
	d := Digest{Region: "eu", Process: "host-1", Epoch: 1234567, Demand: 700.5, Admitted: 650, Learned: 12,
		Keys: []KeyDemand{{Key: "k1", Demand: 500, Admitted: 480}, {Key: "k2", Demand: 0.25, Admitted: 0}}}
	b, n, err := d.encode(nil, MaxDigestSize)
	if err != nil || n != 2 {
		t.Fatalf("encode: n=%d err=%v", n, err)
	}
	got, err := DecodeDigest(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Region != d.Region || got.Process != d.Process || got.Epoch != d.Epoch || got.Goodbye ||
		got.Demand != d.Demand || got.Admitted != d.Admitted || got.Learned != d.Learned || len(got.Keys) != 2 ||
		got.Keys[0] != d.Keys[0] || got.Keys[1] != d.Keys[1] {
		t.Fatalf("round trip: got %+v, want %+v", got, d)
	}
	bye := Digest{Region: "eu", Process: "p", Goodbye: true}
	b, err = bye.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := DecodeDigest(b); err != nil || !got.Goodbye || got.Process != "p" {
		t.Fatalf("goodbye: %+v %v", got, err)
	}
	if _, err := (&Digest{Region: "eu", Process: "a.b"}).MarshalBinary(); err == nil {
		t.Fatal("MarshalBinary took a process name with a dot")
	}
}

func TestDigestBounded(t *testing.T) {
	d := Digest{Region: "eu", Process: "p"}
	for i := 0; i < 5000; i++ {
		d.Keys = append(d.Keys, KeyDemand{Key: fmt.Sprintf("%0200d", i), Demand: float64(5000 - i)})
	}
	for _, max := range []int{512, 4096, 60 << 10, MaxDigestSize} {
		b, n, err := d.encode(nil, max)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > max {
			t.Fatalf("max %d: digest is %d bytes", max, len(b))
		}
		got, err := DecodeDigest(b)
		if err != nil || len(got.Keys) != n || n == 0 {
			t.Fatalf("max %d: decoded %d keys of %d: %v", max, len(got.Keys), n, err)
		}
		if got.Keys[0].Key != d.Keys[0].Key {
			t.Fatalf("max %d: the top key was not kept first", max)
		}
	}
}

func TestDecodeDigestRejects(t *testing.T) {
	good := Digest{Region: "eu", Process: "p", Keys: []KeyDemand{{Key: "k", Demand: 1}}}
	b, _, _ := good.encode(nil, MaxDigestSize)
	mutate := func(f func([]byte) []byte) []byte { return f(append([]byte(nil), b...)) }
	tests := []struct {
		name string
		in   []byte
	}{
		{"empty", nil},
		{"no magic", []byte("XX\x01\x00")},
		{"future version", mutate(func(x []byte) []byte { x[2] = 2; return x })},
		{"unknown flag", mutate(func(x []byte) []byte { x[3] = 0x80; return x })},
		{"truncated", b[:len(b)-1]},
		{"trailing", append(append([]byte(nil), b...), 0)},
		{"too large", append([]byte("QG\x01\x00"), make([]byte, MaxDigestSize)...)},
		{"huge key count", append([]byte("QG\x01\x00\x02eu\x01p\x00"), append(make([]byte, 12), 0xff, 0xff, 0xff, 0x0f)...)},
		{"negative rate", encodeRaw(t, "eu", "p", -1)},
		{"NaN rate", encodeRaw(t, "eu", "p", math.NaN())},
		{"dotted region", encodeRaw(t, "e.u", "p", 1)},
		{"repeated key", func() []byte {
			d := Digest{Region: "eu", Process: "p", Keys: []KeyDemand{{Key: "k", Demand: 1}, {Key: "k", Demand: 2}}}
			x, _, _ := d.encode(nil, MaxDigestSize)
			return x
		}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeDigest(tt.in); !errors.Is(err, ErrBadDigest) {
				t.Fatalf("got %v, want ErrBadDigest", err)
			}
		})
	}
}

// encodeRaw writes a digest without the encoder's checks, to test the
// decoder's.
func encodeRaw(t *testing.T, region, process string, demand float64) []byte {
	t.Helper()
	b := []byte{'Q', 'G', DigestVersion, 0}
	b = appendString(b, region)
	b = appendString(b, process)
	b = append(b, 0) // epoch
	b = appendRawRate(b, demand)
	b = appendRawRate(b, 0)
	b = appendRawRate(b, 0)
	return append(b, 0) // no keys
}

func appendRawRate(b []byte, v float64) []byte {
	u := math.Float32bits(float32(v))
	return append(b, byte(u), byte(u>>8), byte(u>>16), byte(u>>24))
}

func FuzzDecodeDigest(f *testing.F) {
	d := Digest{Region: "eu", Process: "p", Epoch: 9, Demand: 3, Keys: []KeyDemand{{Key: "k", Demand: 1, Admitted: 1}}}
	b, _, _ := d.encode(nil, MaxDigestSize)
	f.Add(b)
	f.Add([]byte("QG\x01\x01\x02eu\x01p"))
	f.Add([]byte(strings.Repeat("QG", 10)))
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := DecodeDigest(data)
		if err != nil {
			if !errors.Is(err, ErrBadDigest) {
				t.Fatalf("error does not wrap ErrBadDigest: %v", err)
			}
			return
		}
		// Whatever decodes must encode back to something that decodes the same.
		again, _, err := got.encode(nil, MaxDigestSize)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		back, err := DecodeDigest(again)
		if err != nil || back.Region != got.Region || len(back.Keys) != len(got.Keys) {
			t.Fatalf("re-decode: %+v vs %+v: %v", back, got, err)
		}
	})
}

func TestParseWeights(t *testing.T) {
	tests := []struct {
		in      string
		want    map[string]float64
		wantErr bool
	}{
		{"", map[string]float64{}, false},
		{"eu=0.5,us=0.3,ap=0.2", map[string]float64{"eu": 0.5, "us": 0.3, "ap": 0.2}, false},
		{" eu = 1 ", nil, true},
		{"eu=1,eu=2", nil, true},
		{"eu", nil, true},
		{"eu=-1", nil, true},
		{"e.u=1", nil, true},
		{"eu=NaN", nil, true},
	}
	for _, tt := range tests {
		got, err := ParseWeights(tt.in)
		if (err != nil) != tt.wantErr {
			t.Fatalf("%q: err %v", tt.in, err)
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Fatalf("%q: got %v", tt.in, got)
			}
		}
	}
}
