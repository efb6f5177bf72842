package main

import (
	"encoding/base64"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

// TestRegionSet: the region set comes from --regions or --region-weights
// (which must agree), defaults to --region alone only with embedded NATS,
// and must hold --region; errors name the flags.
func TestRegionSet(t *testing.T) {
	const nats = "nats://127.0.0.1:4222"
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want []string // nil: an error containing err
		err  string
	}{
		{"embedded NATS, no flag", nil, nil, []string{"local"}, ""},
		{"embedded NATS, own region", []string{"--region", "eu"}, nil, []string{"eu"}, ""},
		{"--nats needs a region set", []string{"--nats", nats, "--region", "eu"}, nil, nil, "--regions: required with --nats"},
		{"--nats, one region", []string{"--nats", nats, "--region", "eu", "--regions", "eu"}, nil, []string{"eu"}, ""},
		{"--nats, regions from env", []string{"--nats", nats, "--region", "eu"}, map[string]string{"QUOTA_REGIONS": "us, eu ,ap"}, []string{"us", "eu", "ap"}, ""},
		{"from weights", []string{"--nats", nats, "--region", "eu", "--region-weights", "us=0.3,eu=0.5,ap=0.2"}, nil, []string{"ap", "eu", "us"}, ""},
		{"both, agreeing", []string{"--nats", nats, "--region", "eu", "--regions", "us,eu", "--region-weights", "eu=1,us=1"}, nil, []string{"us", "eu"}, ""},
		{"both, disagreeing", []string{"--region", "eu", "--regions", "eu,us,ap", "--region-weights", "eu=1,us=1"}, nil, nil, "--regions and --region-weights disagree: --regions names ap,eu,us, --region-weights eu,us"},
		{"own region missing", []string{"--region", "eu", "--regions", "us,ap"}, nil, nil, `--regions: must include --region "eu"`},
		{"own region not weighed", []string{"--nats", nats, "--region", "eu", "--region-weights", "us=1,ap=1"}, nil, nil, `--regions: must include --region "eu"`},
		{"region repeated", []string{"--region", "eu", "--regions", "eu,us,eu"}, nil, nil, `--regions: gossip: region "eu" repeated`},
		{"empty entry", []string{"--region", "eu", "--regions", "eu,,us"}, nil, nil, "--regions: "},
		{"dotted region", []string{"--region", "eu", "--regions", "eu,us.east"}, nil, nil, "--regions: "},
		{"bad weight", []string{"--region", "eu", "--region-weights", "eu=x"}, nil, nil, "--region-weights: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setQuotaEnv(t, tt.env)
			o, err := parseOptions(tt.args, io.Discard)
			if tt.want == nil {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got, err := regionSet(o)
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("regionSet = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

// TestMemberlistKeyFlag: --memberlist-key (or QUOTA_MEMBERLIST_KEY) is
// base64 of 16, 24 or 32 bytes, several for rotation; anything else is an
// error naming the flag, and neither errors nor Options print the key.
func TestMemberlistKeyFlag(t *testing.T) {
	b64 := func(n int, c byte) string {
		return base64.StdEncoding.EncodeToString([]byte(strings.Repeat(string(c), n)))
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		err  string // empty: accepted
	}{
		{"none", nil, nil, ""},
		{"16 bytes", []string{"--memberlist-key", b64(16, 'a')}, nil, ""},
		{"24 bytes from env", nil, map[string]string{"QUOTA_MEMBERLIST_KEY": b64(24, 'b')}, ""},
		{"32 bytes, then an old one", []string{"--memberlist-key", b64(32, 'c') + "," + b64(16, 'd')}, nil, ""},
		{"10 bytes", []string{"--memberlist-key", b64(10, 'e')}, nil, "--memberlist-key: membership: key 1: key is 10 bytes, want 16, 24 or 32"},
		{"second key bad", nil, map[string]string{"QUOTA_MEMBERLIST_KEY": b64(32, 'f') + "," + b64(33, 'g')}, "--memberlist-key: membership: key 2: key is 33 bytes"},
		{"not base64", []string{"--memberlist-key", "zzzz-not-base64-zzzz"}, nil, "--memberlist-key: membership: key 1: not standard base64"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			setQuotaEnv(t, tt.env)
			t.Setenv("QUOTA_MEMBERLIST_BIND", "127.0.0.1:0") // keys need membership
			o, err := parseOptions(tt.args, io.Discard)
			// The keys given, whole and one by one.
			var keys []string
			for _, v := range append(tt.args, mapValues(tt.env)...) {
				if !strings.HasPrefix(v, "--") {
					keys = append(keys, v)
					keys = append(keys, strings.Split(v, ",")...)
				}
			}
			shown := fmt.Sprintf("%v %+v %#v", o, o, o)
			if err != nil {
				shown += err.Error()
			}
			for _, k := range keys {
				if strings.Contains(shown, k) {
					t.Fatalf("a key shows in Options or the error: %s", shown)
				}
			}
			if tt.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.err)
			}
		})
	}
}

func mapValues(m map[string]string) []string {
	var out []string
	for _, v := range m {
		out = append(out, v)
	}
	return out
}
