package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/region/store"
)

// TestLeaseScriptArguments calls lua/lease.lua directly, past
// store.LeaseRequest.Validate: arguments out of range are refused, naming the
// argument, before anything is written; a key of another type fails before
// anything is written too; and a tiny rate, which made PEXPIRE fail after
// HSET had run, now writes a sane bucket with the clamped TTL.
func TestLeaseScriptArguments(t *testing.T) {
	if testing.Short() {
		t.Skip("needs redis-server")
	}
	srv := testserver.StartRedis(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	prefix := fmt.Sprintf("lua%d:", time.Now().UnixNano())
	valid := []string{"10", "10", "1", "1", "0", "1", "0", "0", "0"} // rate … grace
	with := func(i int, v string) []string {
		a := append([]string(nil), valid...)
		a[i-1] = v
		return a
	}
	run := func(key string, argv []string) (any, error) {
		args := make([]any, len(argv))
		for i, a := range argv {
			args[i] = a
		}
		return leaseScript.Run(ctx, rdb, []string{key}, args...).Result()
	}
	snapshot := func(key string) string {
		typ := rdb.Type(ctx, key).Val()
		switch typ {
		case "hash":
			return fmt.Sprint(typ, rdb.HGetAll(ctx, key).Val())
		case "string":
			return fmt.Sprint(typ, rdb.Get(ctx, key).Val())
		}
		return typ
	}

	cases := []struct {
		name    string
		setup   func(key string) // state before the call; nil: no key
		argv    []string
		errHas  string // "" = the call succeeds
		errCode string // the reply's code, when it fails
	}{
		{"rate NaN", nil, with(1, "nan"), "ARGV[1] rate", "ERR"},
		{"rate +Inf", nil, with(1, "inf"), "ARGV[1] rate", "ERR"},
		{"rate zero", nil, with(1, "0"), "ARGV[1] rate", "ERR"},
		{"rate not a number", nil, with(1, "fast"), "ARGV[1] rate", "ERR"},
		{"capacity -Inf", nil, with(2, "-inf"), "ARGV[2] capacity", "ERR"},
		{"want fractional", nil, with(3, "1.5"), "ARGV[3] want", "ERR"},
		{"want above 2^53", nil, with(3, "1e300"), "ARGV[3] want", "ERR"},
		{"min negative", nil, with(4, "-1"), "ARGV[4] min", "ERR"},
		{"spread zero", nil, with(6, "0"), "ARGV[6] spread", "ERR"},
		{"grace negative", nil, with(9, "-5"), "ARGV[9] grace", "ERR"},
		{"bad argument leaves an existing bucket alone",
			func(key string) {
				if _, err := run(key, valid); err != nil {
					t.Fatal(err)
				}
			}, with(1, "nan"), "ARGV[1] rate", "ERR"},
		{"a key of another type fails before any write",
			func(key string) { rdb.Set(ctx, key, "not a hash", 0) }, valid, "WRONGTYPE", "WRONGTYPE"},
		{"tiny rate writes a bucket with the clamped TTL", nil, with(1, "5e-324"), "", ""},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := prefix + strconv.Itoa(i)
			if tc.setup != nil {
				tc.setup(key)
			}
			before := snapshot(key)
			_, err := run(key, tc.argv)
			if tc.errHas != "" {
				var reply redis.Error
				if err == nil || !errors.As(err, &reply) || !strings.Contains(err.Error(), tc.errHas) ||
					!strings.HasPrefix(err.Error(), tc.errCode+" ") {
					t.Fatalf("err = %v, want a %s reply naming %q", err, tc.errCode, tc.errHas)
				}
				if store.IsTransient(err) {
					t.Fatalf("isTransient(%v) = true: a reply about one key would count toward the breaker", err)
				}
				if after := snapshot(key); after != before {
					t.Fatalf("the refused call wrote: %s, then %s", before, after)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			h := rdb.HGetAll(ctx, key).Val()
			if tok, err := strconv.ParseFloat(h["t"], 64); err != nil || tok != 9 {
				t.Fatalf("bucket %v: tokens %q, want 9", h, h["t"])
			}
			if _, err := strconv.ParseInt(h["ts"], 10, 64); err != nil {
				t.Fatalf("bucket %v: ts %q is not an integer", h, h["ts"])
			}
			pttl := rdb.PTTL(ctx, key).Val()
			if pttl > store.MaxBucketTTL || pttl < store.MaxBucketTTL-time.Minute {
				t.Fatalf("PTTL %v, want the clamp %v", pttl, store.MaxBucketTTL)
			}
		})
	}
}
