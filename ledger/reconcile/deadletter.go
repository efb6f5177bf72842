package reconcile

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// DeadLetter is a message the reconciler will not write to the ledger. It is
// recorded (Store.DeadLetter) and then terminated on the stream, so that it
// never blocks the messages behind it.
type DeadLetter struct {
	// Stream and StreamSeq locate the message; StreamSeq is 0 when unknown.
	Stream    string
	StreamSeq uint64
	// PublishedAt is when the stream stored the message; zero when unknown.
	PublishedAt time.Time
	Subject     string
	// Index is the report's place in a batch message (ledger.EncodingBatch)
	// when the letter is one report of it; -1 when it is the whole message.
	Index int
	// Data is the message body exactly as received, or, for one report of
	// a batch, that report alone as JSON.
	Data   []byte
	Reason Reason
	// Detail is the error, for people.
	Detail string
}

const insertDeadLetter = `INSERT INTO usage_dead_letters (stream, stream_seq, published_at, subject, reason, detail, raw, report_index)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (stream, stream_seq, published_at, report_index) DO NOTHING`

// DeadLetter records letters in table usage_dead_letters in one
// transaction. A letter already recorded (same stream, sequence, publish
// time and report index: a redelivery) is not recorded again. Text that Postgres cannot
// store (NUL, invalid UTF-8) is replaced, so that recording fails only when
// Postgres does.
func (w *Writer) DeadLetter(ctx context.Context, letters []DeadLetter) error {
	if len(letters) == 0 {
		return nil
	}
	var b pgx.Batch
	for _, l := range letters {
		var seq, at any // NULL when unknown
		if l.StreamSeq != 0 {
			seq = int64(l.StreamSeq)
		}
		if !l.PublishedAt.IsZero() {
			at = l.PublishedAt
		}
		data := l.Data
		if data == nil {
			data = []byte{}
		}
		b.Queue(insertDeadLetter, pgText(l.Stream), seq, at, pgText(l.Subject), pgText(string(l.Reason)), pgText(l.Detail), data, l.Index)
	}
	err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error { return tx.SendBatch(ctx, &b).Close() })
	if err != nil {
		return fmt.Errorf("reconcile: record dead letters: %w", err)
	}
	return nil
}

// pgText makes s storable as Postgres text: valid UTF-8 without NUL.
func pgText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}
