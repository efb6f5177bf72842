package reconcile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/nats-io/nats.go/jetstream"
)

func TestIsTransient(t *testing.T) {
	pg := func(code string) error {
		return fmt.Errorf("reconcile: upsert: %w", &pgconn.PgError{Code: code, Message: "m"})
	}
	tests := []struct {
		name      string
		err       error
		transient bool
	}{
		{"nil", nil, false},
		{"cardinality violation (a row twice in one upsert)", pg("21000"), false},
		{"numeric value out of range", pg("22003"), false},
		{"invalid UTF-8", pg("22021"), false},
		{"datetime field overflow", pg("22008"), false},
		{"check violation", pg("23514"), false},
		{"not-null violation", pg("23502"), false},
		{"unique violation", pg("23505"), false},
		{"connection failure", pg("08006"), true},
		{"serialization failure", pg("40001"), true},
		{"deadlock", pg("40P01"), true},
		{"too many connections", pg("53300"), true},
		{"statement timeout (query canceled)", pg("57014"), true},
		{"admin shutdown", pg("57P01"), true},
		{"table missing (not migrated)", pg("42P01"), true},
		{"permission denied", pg("42501"), true},
		{"read-only transaction", pg("25006"), true},
		{"internal error", pg("XX000"), true},
		{"malformed code", pg("2"), true},
		{"deadline exceeded", fmt.Errorf("reconcile: begin: %w", context.DeadlineExceeded), true},
		{"canceled", context.Canceled, true},
		{"connection reset", &net.OpError{Op: "read", Err: errors.New("connection reset by peer")}, true},
		{"unexpected EOF", io.ErrUnexpectedEOF, true},
		{"unknown error", errors.New("x"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := isTransient(tt.err); got != tt.transient {
				t.Fatalf("isTransient(%v) = %v, want %v", tt.err, got, tt.transient)
			}
		})
	}
}

func TestConsumerLost(t *testing.T) {
	tests := []struct {
		name string
		err  error
		lost bool
	}{
		{"consumer deleted", jetstream.ErrConsumerDeleted, true},
		{"consumer not found (info)", fmt.Errorf("reconcile: consumer info: %w", jetstream.ErrConsumerNotFound), true},
		{"stream deleted", jetstream.ErrStreamNotFound, true},
		{"iterator closed", jetstream.ErrMsgIteratorClosed, true},
		{"iterator closed with the connection", fmt.Errorf("%w: %w", jetstream.ErrMsgIteratorClosed, jetstream.ErrConnectionClosed), true},
		{"bad request (iterator stopped)", jetstream.ErrBadRequest, true},
		{"missing heartbeats", jetstream.ErrNoHeartbeat, true},
		{"leadership change", jetstream.ErrConsumerLeadershipChanged, false},
		{"timeout", context.DeadlineExceeded, false},
		{"other", errors.New("x"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := consumerLost(tt.err); got != tt.lost {
				t.Fatalf("consumerLost(%v) = %v, want %v", tt.err, got, tt.lost)
			}
		})
	}
}
