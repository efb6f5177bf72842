package reconcile_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/internal/ledgertest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
	"github.com/quotaplatform/quota/region"
)

// A region cannot touch another region's rows (issue 28, item 5). A holder
// of ap's limiter credentials may publish only on ap's subjects, and the
// subject check makes every report there one of ap's; but it may name any
// process, eu's included. Its reports, on real JetStream through the
// reconciler into Postgres, land in rows of ap's own and leave eu's row as
// eu reported it, whether ap's forgery comes after eu's report (a huge seq,
// final, refunds that would win every merge) or before it.
// (TestMessageIDCannotBeSquatted publishes under eu's real message ID.)
func TestRegionCannotTouchAnotherRegionsRows(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	js := connect(t, testserver.StartNATS(t).URL)
	startReconciler(t, js, reconcile.NewWriter(pool), nil)
	ctx := context.Background()

	type row struct {
		spent, refunded, seq int64
		final                bool
	}
	for _, tc := range []struct {
		name        string
		forgedFirst bool
		forged      func(genuine ledger.Report) ledger.Report
	}{
		{"forgery after eu's report", false, func(g ledger.Report) ledger.Report {
			g.Region, g.Seq, g.Final, g.Spent, g.Refunded = "ap", 1<<62, true, 0, 1_000_000
			return g
		}},
		{"forgery before eu's report", true, func(g ledger.Report) ledger.Report {
			g.Region, g.Spent = "ap", 0 // seq, key, window and process as eu's
			return g
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			genuine := rep("acct-"+tc.name, "eu-1", 1, 40, 40, false)
			forged := tc.forged(genuine)
			if got := ledger.DefaultStreamConfig().Subject(forged.Region, forged.ProcessID); got != "quota.usage.ap.eu-1" {
				t.Fatalf("forged report published on %s, want ap's own subject", got)
			}
			if tc.forgedFirst {
				publish(t, js, "", forged)
				publish(t, js, "", genuine)
			} else {
				publish(t, js, "", genuine)
				publish(t, js, "", forged)
			}
			// ap's refund is cut to what its row spent (issue 37, item 2).
			want := map[string]row{"eu": {40, 0, 1, false}, "ap": {forged.Spent, min(forged.Refunded, forged.Spent+forged.Charged), forged.Seq, forged.Final}}
			testserver.WaitFor(t, 20*time.Second, 20*time.Millisecond, func() error {
				got := map[string]row{}
				rows, err := pool.Query(ctx, `SELECT region, spent, refunded, seq, final FROM usage_reports
					WHERE key = $1 AND process_id = 'eu-1'`, genuine.Key)
				if err != nil {
					return err
				}
				defer rows.Close()
				for rows.Next() {
					var region string
					var r row
					if err := rows.Scan(&region, &r.spent, &r.refunded, &r.seq, &r.final); err != nil {
						return err
					}
					got[region] = r
				}
				if err := rows.Err(); err != nil {
					return err
				}
				if len(got) != len(want) || got["eu"] != want["eu"] || got["ap"] != want["ap"] {
					return fmt.Errorf("rows by region %+v, want %+v", got, want)
				}
				return nil
			})
		})
	}
}

// Issue 37, item 3: JetStream's duplicate window spans the stream, so ap
// publishing first under the message ID eu's Reporter is about to use
// (--usage-encoding json) made eu's report a "duplicate": ledger 0 rows,
// the Reporter counting it delivered. The old IDs were the report's
// MsgID, easy to guess. Here ap even knows eu's nonce (as if leaked: it
// reads eu's last ID from the stream) and squats eu's real next ID. The
// Reporter takes the Duplicate it did not cause for a failure and sends
// the report again under a new ID, so it lands; the reconciler
// dead-letters ap's message, whose ID is namespaced for eu's subject.
func TestMessageIDCannotBeSquatted(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	js := connect(t, testserver.StartNATS(t).URL)
	startReconciler(t, js, reconcile.NewWriter(pool), nil)
	ctx := context.Background()
	clk := clock.NewManual(t0.Add(10 * time.Second))
	eu, m := newReporter(t, js, "eu-1", func(c *ledger.Config) { c.Clock, c.Encoding = clk, ledger.EncodingJSON })
	stream, err := js.Stream(ctx, ledger.DefaultStreamConfig().Name)
	if err != nil {
		t.Fatal(err)
	}
	subject := ledger.DefaultStreamConfig().Subject("eu", "eu-1")

	eu.Record([]region.Usage{{Key: "warm", WindowStart: t0, Spent: 1, Leased: 1}})
	if err := eu.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	last, err := stream.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	genuine := ledger.Report{Key: "victim", WindowStart: t0, ProcessID: "eu-1", Region: "eu", Seq: 1}
	next := nextMsgID(t, last.Header.Get(nats.MsgIdHdr), genuine)

	ack, err := js.PublishMsg(ctx, &nats.Msg{Subject: ledger.DefaultStreamConfig().Subject("ap", "eu-1"), Data: []byte("{}")},
		jetstream.WithMsgID(next))
	if err != nil || ack.Duplicate {
		t.Fatalf("ap's squatting publish: %+v, %v", ack, err)
	}
	eu.Record([]region.Usage{{Key: "victim", WindowStart: t0, Spent: 40, Leased: 40}})
	flushes := 0
	testserver.WaitFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		flushes++
		_ = eu.Flush(ctx) // the squatted attempt fails; the next sends under a new ID
		var spent int64
		if err := pool.QueryRow(ctx, `SELECT coalesce(sum(spent), 0)::bigint FROM usage_reports WHERE key = 'victim'`).Scan(&spent); err != nil || spent != 40 {
			return fmt.Errorf("victim's spent %d (%v), want 40", spent, err)
		}
		return nil
	})
	testserver.WaitFor(t, 10*time.Second, 20*time.Millisecond, func() error {
		got, err := reasonCounts(pool)
		if err != nil || got["subject"] != 1 {
			return fmt.Errorf("dead letters %v (%v), want ap's message refused for its subject", got, err)
		}
		return nil
	})
	t.Logf("ap squatted eu's next id %q: eu's report landed after %d flush(es), %v failed publication(s)",
		next, flushes, val(m.PublishErr))
}

// nextMsgID is the ID eu's Reporter publishes its next message under,
// from the last one it published: "<subject>|<nonce>|<n>" (n in base 36)
// now, the report's own MsgID before.
func nextMsgID(t *testing.T, last string, next ledger.Report) string {
	t.Helper()
	ns, rest, ok := strings.Cut(last, "|")
	nonce, n, ok2 := strings.Cut(rest, "|")
	if !ok || !ok2 || !strings.HasPrefix(ns, "quota.usage.") {
		return next.MsgID()
	}
	i, err := strconv.ParseUint(n, 36, 64)
	if err != nil {
		t.Fatalf("message id %q: %v", last, err)
	}
	return ns + "|" + nonce + "|" + strconv.FormatUint(i+1, 36)
}

// A process cannot write another process's rows (issue 37, item 6). The
// shipped NATS configuration gives each limiter process its own credential,
// allowed to publish usage only on its own subject (internal/natsconf,
// TestProcessCredentialRefusedOnAnotherProcessesSubject); here eu-2, on
// real JetStream through the reconciler into Postgres, claims eu-1's rows
// every way the subject check could let through. Each forgery is
// dead-lettered for its subject and eu-1's row stays as eu-1 reported it,
// while eu-2's own reports, its incarnations' included, land under its
// identity's subject.
func TestProcessCannotWriteAnotherProcessesRows(t *testing.T) {
	pool := migratedPool(t, ledgertest.MigratedDatabase(t))
	js := connect(t, testserver.StartNATS(t).URL)
	startReconciler(t, js, reconcile.NewWriter(pool), nil)
	ctx := context.Background()

	genuine := rep("acct-victim", "eu-1@kx2", 1, 40, 40, false)
	publishOn(t, js, "quota.usage.eu.eu-1", genuine)
	forge := func(process string) ledger.Report {
		f := genuine
		f.ProcessID, f.Seq, f.Final, f.Spent, f.Leased = process, 1<<62, true, 1_000_000, 1_000_000
		return f
	}
	forgeries := []struct {
		name, subject string
		rep           ledger.Report
	}{
		{"eu-1's row on eu-2's subject", "quota.usage.eu.eu-2", forge("eu-1@kx2")},
		{"eu-1's identity on eu-2's subject", "quota.usage.eu.eu-2", forge("eu-1")},
		{"eu-1's row on the region's subject", "quota.usage.eu", forge("eu-1@kx2")},
		{"eu-1's late row on eu-2's subject", "quota.usage.eu.eu-2", forge("eu-1@kx2~latelx3k.1")},
	}
	for _, f := range forgeries {
		publishOn(t, js, f.subject, f.rep)
	}
	own := rep("acct-own", "eu-2@kx9", 1, 7, 7, false)
	publishOn(t, js, "quota.usage.eu.eu-2", own)

	type row struct {
		process string
		spent   int64
		seq     int64
	}
	testserver.WaitFor(t, 20*time.Second, 20*time.Millisecond, func() error {
		got, err := reasonCounts(pool)
		if err != nil || got["subject"] != len(forgeries) || len(got) != 1 {
			return fmt.Errorf("dead letters %v (%v), want the %d forgeries refused for their subject", got, err, len(forgeries))
		}
		rows, err := pool.Query(ctx, `SELECT process_id, spent, seq FROM usage_reports ORDER BY process_id`)
		if err != nil {
			return err
		}
		defer rows.Close()
		var have []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.process, &r.spent, &r.seq); err != nil {
				return err
			}
			have = append(have, r)
		}
		want := []row{{"eu-1@kx2", 40, 1}, {"eu-2@kx9", 7, 1}}
		if fmt.Sprint(have) != fmt.Sprint(want) {
			return fmt.Errorf("ledger rows %v, want %v", have, want)
		}
		return nil
	})
	t.Logf("%d forgeries by eu-2 of eu-1's rows: all dead-lettered (reason subject); eu-1's row spent 40, seq 1", len(forgeries))
}

// publishOn publishes rep on subject, as a holder of that subject's
// credential could, and waits for the stream's acknowledgement.
func publishOn(t *testing.T, js jetstream.JetStream, subject string, rep ledger.Report) {
	t.Helper()
	data, err := rep.Encode()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: data}, jetstream.WithMsgID(subject+"|"+rep.MsgID())); err != nil {
		t.Fatalf("publish on %s: %v", subject, err)
	}
}
