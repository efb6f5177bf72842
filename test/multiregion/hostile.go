package multiregion

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/gossip"
	"github.com/quotaplatform/quota/internal/natsrole"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/reconcile"
	"github.com/quotaplatform/quota/region"
)

// Hostile is what a holder of one region's limiter NATS credentials
// publishes during a scenario (issue 28): every limiter pod of a region
// shares them, so one compromised pod may publish any gossip digest or
// goodbye on quota.gossip.<region>.<any process>, and any usage report of
// the region on quota.usage.<region>.<any process>. Every gossip interval,
// a fifth of an interval after the boundary (after the real digests of
// that epoch), it publishes what its gossip fields ask; the usage batches
// once, when it starts.
type Hostile struct {
	// Region is the region whose limiter credentials are used.
	Region string
	// Goodbyes publishes a goodbye for each of the region's processes:
	// without bounded trust the other regions drop the region while it
	// still enforces its share.
	Goodbyes bool
	// Claims lists keys for which an invented process ("hostile-claims")
	// claims float32's largest demand and admitted cost, with the largest
	// key age: without bounds it pins every other region at its floor.
	Claims []string
	// OneShots publishes one digest from a new, never-repeated process name
	// (claiming Claims' keys at 1 cost unit/s): without bounded trust each
	// counts as missing at the next tick and freezes every region's shares.
	OneShots bool
	// Squat publishes a digest claiming nothing for each of
	// gossip.DefaultConfig().MaxProcesses invented processes
	// ("hostile-squat-<i>"), and again at nine tenths of the interval, so
	// that a limiter starting meanwhile hears them before the region's
	// real processes (issue 37): before crowded regions counted as claiming
	// their maximum, such a limiter refused the real processes for want of
	// room, counted the region at zero demand and took 1 − floor of every
	// key, also after the forger stopped.
	Squat bool
	// MonthsKey, if set, is the key of one usage batch (published once, at
	// the start) of HostileBatchReports reports, one per month, in the
	// months from HostileBatchReports/2 before the current one to as many
	// after: before the ingestion bounds the writer created every month's
	// partition in one transaction, Postgres ran out of shared memory and
	// ingestion stalled for ever.
	MonthsKey string
	// OverflowKey, if set, is the key of one usage batch (published once,
	// at the start) of HostileBatchReports late rows ("<process>~late<i>")
	// of the current window, each spending reconcile.MaxCounter: before
	// the overflow guard their sum overflowed bigint and broke the key's
	// /v1/usage and every key's export of the month.
	OverflowKey string
	// RefundKey, if set, is the key of one forged report (published once,
	// at the start, as JSON on HostileForgedSubject) of the current window
	// that spends nothing and refunds reconcile.MaxCounter (issue 37, item
	// 2): before refunds were bounded by spent + charged it took the key's
	// net, quota base and bill below zero in every region.
	RefundKey string
	// ForeverKey, if set, is the key of one forged report (published with
	// RefundKey's) of the previous window, not final, ending at
	// HostileForever (item 4): before windows were bounded the closer never
	// closed its row and the key's month never completed.
	ForeverKey string
}

// HostileForgedProcess is the process the forged single reports
// (Hostile.RefundKey, ForeverKey) and the message-id squats
// (SquatMessageIDs) are published as.
const HostileForgedProcess = "hostile-forged"

// HostileForever is the window_end of Hostile.ForeverKey's report.
var HostileForever = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// HostileForgedSubject is the subject of region's forged reports and
// message-id squats.
func HostileForgedSubject(region string) string {
	return ledger.DefaultStreamConfig().Subject(region, HostileForgedProcess)
}

// HostileBatchProcess is the process the hostile usage batches are
// published as: on quota.usage.<region>.hostile-batch.
const HostileBatchProcess = "hostile-batch"

// HostileBatchReports is the number of reports in each hostile batch.
const HostileBatchReports = 2000

// StartHostile connects with h.Region's limiter credentials and publishes
// h until the returned stop is called; stop waits for the publisher to end
// and returns how many messages it published.
func (c *Cluster) StartHostile(h Hostile) (stop func() int) {
	c.t.Helper()
	nc, err := c.hostileConn(h.Region)
	if err != nil {
		c.t.Fatalf("multiregion: hostile %s: %v", h.Region, err)
	}
	batches, err := c.publishHostileBatches(nc, h)
	if err != nil {
		nc.Close()
		c.t.Fatalf("multiregion: hostile %s: %v", h.Region, err)
	}
	iv := c.spec.GossipInterval
	done, quit := make(chan struct{}), make(chan struct{})
	var mu sync.Mutex
	sent := batches // guarded by mu
	// wait waits until the next instant at offset after an interval
	// boundary, and reports false if stop was called meanwhile.
	wait := func(offset time.Duration) bool {
		now := time.Now()
		next := now.Truncate(iv).Add(offset)
		if !next.After(now) {
			next = next.Add(iv)
		}
		timer := time.NewTimer(next.Sub(now))
		select {
		case <-quit:
			timer.Stop()
			return false
		case <-timer.C:
			return true
		}
	}
	count := func(n int, err error) {
		if err != nil {
			c.t.Logf("multiregion: hostile %s: %v", h.Region, err)
		}
		mu.Lock()
		sent += n
		mu.Unlock()
	}
	go func() {
		defer close(done)
		for shot := 0; ; shot++ {
			if !wait(iv / 5) {
				return
			}
			epoch := uint64((time.Now().UnixNano() + int64(iv)/2) / int64(iv))
			count(c.hostileRound(nc, h, shot, epoch))
			if !h.Squat {
				continue
			}
			if !wait(iv * 9 / 10) {
				return
			}
			count(publishDigests(nc, squatDigests(h.Region, epoch)))
		}
	}()
	return func() int {
		close(quit)
		<-done
		nc.Close()
		mu.Lock()
		defer mu.Unlock()
		return sent
	}
}

// hostileConn connects to region's NATS server with the region's limiter
// credentials.
func (c *Cluster) hostileConn(region string) (*nats.Conn, error) {
	c.Region(region)
	user := clientUser(region, false)
	nc, err := nats.Connect(c.nats.URL(region), nats.UserInfo(user, c.nats.Password(user)), nats.Timeout(5*time.Second),
		natsrole.Inbox(user))
	if err != nil {
		return nil, fmt.Errorf("connect as %s: %w", user, err)
	}
	return nc, nil
}

// hostileRound publishes one interval's messages of h, of the given gossip
// epoch, and returns how many.
func (c *Cluster) hostileRound(nc *nats.Conn, h Hostile, shot int, epoch uint64) (int, error) {
	var out []gossip.Digest
	if h.Goodbyes {
		for _, n := range c.Region(h.Region).Nodes() {
			out = append(out, gossip.Digest{Region: h.Region, Process: gossipName(n.ID()), Epoch: epoch, Goodbye: true})
		}
	}
	claims := func(rate float64, age uint64) []gossip.KeyDemand {
		ks := make([]gossip.KeyDemand, 0, len(h.Claims))
		for _, k := range h.Claims {
			ks = append(ks, gossip.KeyDemand{Key: k, Demand: rate, Admitted: rate, Age: age})
		}
		return ks
	}
	if len(h.Claims) > 0 {
		huge := math.MaxFloat32
		out = append(out, gossip.Digest{Region: h.Region, Process: "hostile-claims", Epoch: epoch,
			Demand: huge, Admitted: huge, Learned: huge, Keys: claims(huge, gossip.MaxKeyAge)})
	}
	if h.OneShots {
		out = append(out, gossip.Digest{Region: h.Region, Process: fmt.Sprintf("hostile-once-%d", shot), Epoch: epoch,
			Demand: 1, Admitted: 1, Keys: claims(1, 0)})
	}
	if h.Squat {
		out = append(out, squatDigests(h.Region, epoch)...)
	}
	return publishDigests(nc, out)
}

// squatDigests are the digests of Hostile.Squat for one epoch.
func squatDigests(region string, epoch uint64) []gossip.Digest {
	out := make([]gossip.Digest, gossip.DefaultConfig().MaxProcesses)
	for i := range out {
		out[i] = gossip.Digest{Region: region, Process: "hostile-squat-" + strconv.Itoa(i), Epoch: epoch}
	}
	return out
}

// publishDigests publishes each digest on its process's subject and
// returns how many it published.
func publishDigests(nc *nats.Conn, digests []gossip.Digest) (int, error) {
	for i, d := range digests {
		b, err := d.MarshalBinary()
		if err != nil {
			return i, err
		}
		if err := nc.Publish("quota.gossip."+d.Region+"."+d.Process, b); err != nil {
			return i, err
		}
	}
	return len(digests), nc.Flush()
}

// publishHostileBatches publishes h's forged reports (RefundKey,
// ForeverKey; JSON) and usage batches (MonthsKey, OverflowKey; encoded as
// the Reporter encodes them), each with JetStream acknowledgement, and
// returns how many messages it published.
func (c *Cluster) publishHostileBatches(nc *nats.Conn, h Hostile) (int, error) {
	now := time.Now().UTC()
	var batches [][]ledger.Report
	if h.MonthsKey != "" {
		month := time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC)
		reps := make([]ledger.Report, 0, HostileBatchReports)
		for i := range HostileBatchReports {
			start := month.AddDate(0, i-HostileBatchReports/2, 0)
			reps = append(reps, ledger.Report{Key: h.MonthsKey, WindowStart: start, WindowEnd: start.Add(c.spec.Window),
				ProcessID: HostileBatchProcess, Region: h.Region, Spent: 1, Final: true, Seq: 1, SentAt: now})
		}
		batches = append(batches, reps)
	}
	if h.OverflowKey != "" {
		start := now.Truncate(c.spec.Window)
		reps := make([]ledger.Report, 0, HostileBatchReports)
		for i := range HostileBatchReports {
			reps = append(reps, ledger.Report{Key: h.OverflowKey, WindowStart: start, WindowEnd: start.Add(c.spec.Window),
				ProcessID: HostileBatchProcess + "~late" + strconv.Itoa(i), Region: h.Region,
				Spent: reconcile.MaxCounter, Final: true, Seq: 1, SentAt: now})
		}
		batches = append(batches, reps)
	}
	var forged []ledger.Report
	if h.RefundKey != "" {
		start := now.Truncate(c.spec.Window)
		forged = append(forged, ledger.Report{Key: h.RefundKey, WindowStart: start, WindowEnd: start.Add(c.spec.Window),
			ProcessID: HostileForgedProcess, Region: h.Region, Refunded: reconcile.MaxCounter, Final: true, Seq: 1, SentAt: now})
	}
	if h.ForeverKey != "" {
		start := now.Truncate(c.spec.Window).Add(-c.spec.Window)
		forged = append(forged, ledger.Report{Key: h.ForeverKey, WindowStart: start, WindowEnd: HostileForever,
			ProcessID: HostileForgedProcess, Region: h.Region, Seq: 1, SentAt: now})
	}
	if len(batches)+len(forged) == 0 {
		return 0, nil
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, fmt.Errorf("usage batches: %w", err)
	}
	for i := range forged {
		body, err := forged[i].Encode()
		if err != nil {
			return i, err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = js.PublishMsg(ctx, &nats.Msg{Subject: HostileForgedSubject(h.Region), Data: body})
		cancel()
		if err != nil {
			return i, fmt.Errorf("publish forged report of %s on %s: %w", forged[i].Key, HostileForgedSubject(h.Region), err)
		}
	}
	sent := len(forged)
	for i, reps := range batches {
		body, id, err := ledger.EncodeBatch(reps)
		if err != nil {
			return sent + i, fmt.Errorf("usage batch of %s: %w", reps[0].Key, err)
		}
		msg := &nats.Msg{Subject: HostileBatchSubject(h.Region), Data: body, Header: nats.Header{}}
		msg.Header.Set(ledger.HeaderEncoding, ledger.EncodingBatch)
		msg.Header.Set(ledger.HeaderReports, strconv.Itoa(len(reps)))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = js.PublishMsg(ctx, msg, jetstream.WithMsgID(id))
		cancel()
		if err != nil {
			return sent + i, fmt.Errorf("publish usage batch of %s on %s: %w", reps[0].Key, msg.Subject, err)
		}
	}
	return sent + len(batches), nil
}

// HostileBatchSubject is the subject the hostile usage batches of region
// are published on (the harness's stream has the default subject prefix).
func HostileBatchSubject(region string) string {
	return ledger.DefaultStreamConfig().Subject(region, HostileBatchProcess)
}

// gossipName is a process id as gossip names it (a NATS subject token),
// as the participant makes it.
func gossipName(id string) string {
	return strings.NewReplacer(".", "_", "*", "_", ">", "_", " ", "_").Replace(id)
}

// HostileBatchOutcome is what the ledger made of the hostile usage
// batches.
type HostileBatchOutcome struct {
	// MonthsRows and OverflowRows are the rows of usage_reports of the
	// months and overflow keys.
	MonthsRows, OverflowRows int
	// Overflow: usage_windows flags the overflow key's sums as saturated.
	Overflow bool
	// DeadLetters counts the batches' dead letters (their subject's rows
	// of usage_dead_letters) by reason.
	DeadLetters map[string]int
}

// Accounted is the number of the batches' reports the ledger has written
// or dead-lettered.
func (o HostileBatchOutcome) Accounted() int {
	n := o.MonthsRows + o.OverflowRows
	for _, d := range o.DeadLetters {
		n += d
	}
	return n
}

// ReadHostileBatches reads what the ledger made of h's usage batches.
func (c *Cluster) ReadHostileBatches(ctx context.Context, h Hostile) (HostileBatchOutcome, error) {
	var out HostileBatchOutcome
	conn, err := pgx.Connect(ctx, c.pgURL)
	if err != nil {
		return out, fmt.Errorf("hostile batches: %w", err)
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, `SELECT count(*) FILTER (WHERE key = $1)::int, count(*) FILTER (WHERE key = $2)::int
		FROM usage_reports WHERE key IN ($1, $2)`, h.MonthsKey, h.OverflowKey).Scan(&out.MonthsRows, &out.OverflowRows)
	if err != nil {
		return out, fmt.Errorf("hostile batches: usage_reports: %w", err)
	}
	err = conn.QueryRow(ctx, `SELECT coalesce(bool_or(overflow), false) FROM usage_windows WHERE key = $1`, h.OverflowKey).Scan(&out.Overflow)
	if err != nil {
		return out, fmt.Errorf("hostile batches: usage_windows: %w", err)
	}
	out.DeadLetters, err = deadLetterReasons(ctx, conn, HostileBatchSubject(h.Region))
	if err != nil {
		return out, fmt.Errorf("hostile batches: %w", err)
	}
	return out, nil
}

// ExportMonth exports the current UTC month over every key of the ledger,
// as GET /v1/usage/export does (ledger/export, UTC calendar), and returns
// its rows.
func (c *Cluster) ExportMonth(ctx context.Context) ([]export.Row, error) {
	conn, err := pgx.Connect(ctx, c.pgURL)
	if err != nil {
		return nil, fmt.Errorf("export: %w", err)
	}
	defer conn.Close(ctx)
	ex, err := export.New(conn, export.DefaultConfig())
	if err != nil {
		return nil, err
	}
	now := time.Now().UTC()
	from := export.Month.Start(now)
	var out []export.Row
	err = ex.Export(ctx, export.Query{From: from, To: export.Month.Next(from), Granularity: export.Month, Now: now},
		func(rows []export.Row) error {
			out = append(out, rows...)
			return nil
		})
	if err != nil {
		return out, fmt.Errorf("export %s: %w", from.Format("2006-01"), err)
	}
	return out, nil
}

// SetFlags sets flags appended to node n's daemon command line from its
// next run on (RestartProcess); no flags restores the cluster's own.
func (c *Cluster) SetFlags(n *Node, flags ...string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.flags = append([]string(nil), flags...)
}

// IDSquat is what SquatMessageIDs published.
type IDSquat struct {
	// Victims are the reporting process ids (incarnation included) whose
	// ids were squatted.
	Victims []string
	// Predictable counts the messages published under the IDs the victims'
	// next reports had before issue 37 (ledger.Report.MsgID, easy to
	// guess); Namespaced those under IDs namespaced for a victim's subject
	// with a guessed nonce.
	Predictable, Namespaced int
	// Duplicates counts the squats JetStream took for duplicates: the ID
	// was already used.
	Duplicates int
}

// squatNonce is the nonce SquatMessageIDs guesses: the Reporter's is 16
// random bytes (hex), which no limiter can read.
const squatNonce = "00000000000000000000000000000000"

// SquatMessageIDs publishes, with attacker's limiter credentials, `{}` on
// HostileForgedSubject(attacker) under the message IDs victims' next reports
// of keys would have (issue 37, item 3): for each victim process, the
// report IDs (ledger.Report.MsgID) of its next ahead reports of each key in
// the key's current window and of its first ahead in the window after, and
// ahead IDs namespaced for its subject. JetStream's duplicate window spans the
// stream, so before IDs carried a nonce and were bound to their subject,
// each squat made a victim's report a duplicate: dropped, and counted
// delivered. The victims' process ids and windows are read from the ledger
// (waiting until each has reported): the attacker is granted what it
// could otherwise only guess. victims should report with
// --usage-encoding json, the encoding whose IDs were the report's.
func (c *Cluster) SquatMessageIDs(ctx context.Context, attacker string, victims []*Node, keys []string, ahead int) (IDSquat, error) {
	var out IDSquat
	var rows []reportedRow
	for {
		var err error
		rows, err = c.latestRows(ctx, victims, keys)
		seen := map[string]bool{}
		for _, r := range rows {
			seen[strings.SplitN(r.proc, "@", 2)[0]] = true
		}
		if err == nil && len(seen) == len(victims) {
			break
		}
		if err == nil {
			err = fmt.Errorf("%d of %d victims have reported", len(seen), len(victims))
		}
		select {
		case <-ctx.Done():
			return out, fmt.Errorf("id squat: victims' rows: %w (%w)", err, ctx.Err())
		case <-time.After(100 * time.Millisecond): // poll interval of a deadline-bounded wait
		}
	}
	procs := map[string]bool{}
	for _, r := range rows {
		procs[r.proc] = true
	}
	nc, err := c.hostileConn(attacker)
	if err != nil {
		return out, fmt.Errorf("id squat: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(1024))
	if err != nil {
		return out, fmt.Errorf("id squat: %w", err)
	}
	var futures []jetstream.PubAckFuture
	squat := func(id string) error {
		f, err := js.PublishMsgAsync(&nats.Msg{Subject: HostileForgedSubject(attacker), Data: []byte("{}")}, jetstream.WithMsgID(id))
		if err != nil {
			return fmt.Errorf("id squat: publish under %q: %w", id, err)
		}
		futures = append(futures, f)
		return nil
	}
	now := time.Now()
	for _, proc := range sortedKeys(procs) {
		out.Victims = append(out.Victims, proc)
		for _, k := range keys {
			// Each key's windows start at its own offset, to the
			// nanosecond (region.WindowStart); the ledger keeps
			// microseconds.
			start := region.WindowStart(k, now, c.spec.Window)
			var seq int64
			for _, r := range rows {
				if r.proc == proc && r.key == k && region.WindowStart(k, r.start.Add(time.Microsecond), c.spec.Window).Equal(start) {
					seq = r.seq
				}
			}
			for _, w := range []struct {
				start time.Time
				from  int64
			}{{start, seq}, {start.Add(c.spec.Window), 0}} {
				for i := range int64(ahead) {
					rep := ledger.Report{Region: victims[0].Region, ProcessID: proc, Key: k, WindowStart: w.start, Seq: w.from + 1 + i}
					if err := squat(rep.MsgID()); err != nil {
						return out, err
					}
					out.Predictable++
				}
			}
		}
		subject := ledger.DefaultStreamConfig().Subject(victims[0].Region, proc)
		for i := range uint64(ahead) {
			if err := squat(subject + "|" + squatNonce + "|" + strconv.FormatUint(i+1, 36)); err != nil {
				return out, err
			}
			out.Namespaced++
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return out, fmt.Errorf("id squat: acks: %w", ctx.Err())
	}
	for _, f := range futures {
		select {
		case ack := <-f.Ok():
			if ack.Duplicate {
				out.Duplicates++
			}
		case err := <-f.Err():
			return out, fmt.Errorf("id squat: publish under %q: %w", f.Msg().Header.Get(nats.MsgIdHdr), err)
		}
	}
	return out, nil
}

// reportedRow is one row of usage_reports as SquatMessageIDs reads it.
type reportedRow struct {
	proc, key string
	start     time.Time
	seq       int64
}

// latestRows reads the ledger's rows of keys reported by victims' current
// runs (late rows left out): process id, key, window start and seq.
func (c *Cluster) latestRows(ctx context.Context, victims []*Node, keys []string) ([]reportedRow, error) {
	ids := make([]string, len(victims))
	for i, n := range victims {
		ids[i] = n.ID()
	}
	conn, err := pgx.Connect(ctx, c.pgURL)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT process_id, key, window_start, max(seq) FROM usage_reports
		WHERE region = $1 AND split_part(process_id, '@', 1) = ANY($2) AND strpos(process_id, '~') = 0 AND key = ANY($3)
		GROUP BY 1, 2, 3`, victims[0].Region, ids, keys)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []reportedRow
	for rows.Next() {
		var r reportedRow
		if err := rows.Scan(&r.proc, &r.key, &r.start, &r.seq); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// ForgedOutcome is what the ledger made of a Hostile's forged reports and
// of SquatMessageIDs.
type ForgedOutcome struct {
	// DeadLetters counts HostileForgedSubject's dead letters by reason.
	DeadLetters map[string]int
	// RefundRows are HostileForgedProcess's rows of RefundKey; Refunded the
	// largest refunded among them.
	RefundRows int
	Refunded   int64
	// RegionNet is what the forging region's other rows of RefundKey net
	// over the refund horizon before the forged row's window: the most
	// the reconciler lets its refund take back.
	RegionNet int64
	// LongRows counts the ledger's rows whose window is longer than
	// reconcile.MaxWindow.
	LongRows int
}

// ReadForged reads what the ledger made of h's forged reports and the
// message-id squats on HostileForgedSubject(h.Region).
func (c *Cluster) ReadForged(ctx context.Context, h Hostile) (ForgedOutcome, error) {
	var out ForgedOutcome
	conn, err := pgx.Connect(ctx, c.pgURL)
	if err != nil {
		return out, fmt.Errorf("forged reports: %w", err)
	}
	defer conn.Close(ctx)
	err = conn.QueryRow(ctx, `SELECT count(*)::int, coalesce(max(refunded), 0)::bigint FROM usage_reports
		WHERE key = $1 AND process_id = $2`, h.RefundKey, HostileForgedProcess).Scan(&out.RefundRows, &out.Refunded)
	if err != nil {
		return out, fmt.Errorf("forged reports: usage_reports: %w", err)
	}
	err = conn.QueryRow(ctx, `SELECT GREATEST(coalesce(sum(o.spent + o.charged - o.refunded), 0), 0)::bigint
		FROM usage_reports f JOIN usage_reports o ON o.key = f.key AND o.region = f.region AND o.process_id <> f.process_id
		 AND o.window_start BETWEEN f.window_start - make_interval(secs => $3) AND f.window_start
		WHERE f.key = $1 AND f.process_id = $2`, h.RefundKey, HostileForgedProcess,
		reconcile.DefaultRefundHorizon.Seconds()).Scan(&out.RegionNet)
	if err != nil {
		return out, fmt.Errorf("forged reports: usage_reports: %w", err)
	}
	err = conn.QueryRow(ctx, `SELECT count(*)::int FROM usage_reports WHERE window_end - window_start > make_interval(secs => $1)`,
		reconcile.MaxWindow.Seconds()).Scan(&out.LongRows)
	if err != nil {
		return out, fmt.Errorf("forged reports: usage_reports: %w", err)
	}
	out.DeadLetters, err = deadLetterReasons(ctx, conn, HostileForgedSubject(h.Region))
	if err != nil {
		return out, fmt.Errorf("forged reports: %w", err)
	}
	return out, nil
}

// deadLetterReasons counts the ledger's dead letters from one subject by
// reason.
func deadLetterReasons(ctx context.Context, conn *pgx.Conn, subject string) (map[string]int, error) {
	rows, err := conn.Query(ctx, `SELECT reason, count(*)::int FROM usage_dead_letters WHERE subject = $1 GROUP BY reason`, subject)
	if err != nil {
		return nil, fmt.Errorf("usage_dead_letters: %w", err)
	}
	defer rows.Close()
	byReason := map[string]int{}
	for rows.Next() {
		var (
			reason string
			n      int
		)
		if err := rows.Scan(&reason, &n); err != nil {
			return nil, fmt.Errorf("usage_dead_letters: %w", err)
		}
		byReason[reason] = n
	}
	return byReason, rows.Err()
}
