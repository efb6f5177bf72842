package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// replyErr is a Redis error reply, as go-redis returns one.
type replyErr string

func (e replyErr) Error() string { return string(e) }
func (replyErr) RedisError()     {}

func TestIsTransient(t *testing.T) {
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		// About the key: the store answered.
		{"wrong type", replyErr("WRONGTYPE Operation against a key holding the wrong kind of value script: 1f0e, on @user_script:62."), false},
		{"script refused its arguments", replyErr("ERR quota lease: ARGV[1] rate must be a finite number > 0, got nan"), false},
		{"script error", replyErr("ERR user_script:12: attempt to compare nil with number script: 1f0e"), false},
		{"wrapped reply about the key", fmt.Errorf("%w: redis lease %q: %w", ErrStoreRejected, "k", replyErr("WRONGTYPE Operation")), false},
		{"refused request", rejected("lease request rate must be a finite number > 0, got %v", 0.0), false},
		// The store's availability.
		{"loading", replyErr("LOADING Redis is loading the dataset in memory"), true},
		{"read-only replica", replyErr("READONLY You can't write against a read only replica."), true},
		{"cluster down", replyErr("CLUSTERDOWN The cluster is down"), true},
		{"master down", replyErr("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), true},
		{"try again", replyErr("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{"busy script", replyErr("BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT."), true},
		{"out of memory", replyErr("OOM command not allowed when used memory > 'maxmemory'."), true},
		{"cannot persist", replyErr("MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk."), true},
		{"too many clients", replyErr("ERR max number of clients reached"), true},
		{"auth", replyErr("NOAUTH Authentication required."), true},
		{"wrapped availability reply", fmt.Errorf("%w: redis lease %q: %w", ErrStoreUnavailable, "k", replyErr("LOADING Redis is loading")), true},
		{"store unavailable", ErrStoreUnavailable, true},
		{"deadline", context.DeadlineExceeded, true},
		{"cancelled", fmt.Errorf("lease: %w", context.Canceled), true},
		{"connection refused", &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, true},
		{"connection closed", io.EOF, true},
		{"unknown", errors.New("something else"), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := IsTransient(tc.err); got != tc.want {
				t.Fatalf("IsTransient(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}

func TestBucketTTL(t *testing.T) {
	cases := []struct {
		rate, capacity float64
		want           time.Duration
	}{
		{1000, 100, time.Second}, // 200 ms: at least a second
		{1, 100, 200 * time.Second},
		{1e-6, 1, 2e6 * time.Second}, // 23 days: region.MinRate
		{1e-6, 1e12, MaxBucketTTL},   // region.MinRate and MaxCapacity
		{1e-300, 1, MaxBucketTTL},
		{math.SmallestNonzeroFloat64, 1e12, MaxBucketTTL}, // +Inf before the clamp
	}
	for _, tc := range cases {
		if got := BucketTTL(tc.rate, tc.capacity); got != tc.want {
			t.Errorf("BucketTTL(%v, %v) = %v, want %v", tc.rate, tc.capacity, got, tc.want)
		}
	}
}
