package multiregion

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quotaplatform/quota/clock"
	"github.com/quotaplatform/quota/ledger/export"
	"github.com/quotaplatform/quota/ledger/sink"
)

// billingGrace is the Stripe account's invoice finalization grace: longer
// than the outage, so every period can still reach its own invoice (with
// Stripe's default hour, the month's periods refused across its end would
// be re-stamped onto the next month's invoice, as ledger/sink's sendtime
// tests show).
const billingGrace = 48 * time.Hour

// billingCustomers maps the scenario's keys to Stripe customers: two keys
// per customer.
var billingCustomers = map[string]string{
	"billing-k-0": "cus_alpha", "billing-k-1": "cus_alpha",
	"billing-k-2": "cus_beta", "billing-k-3": "cus_beta",
	"billing-k-4": "cus_gamma", "billing-k-5": "cus_gamma",
}

// TestBillingScenario is issue 36's billing scenario, on its own cluster
// (three regions, two limiters each, the reconciler, Postgres). Traffic
// on six keys of three Stripe customers, during which plan billing-basic
// is lowered and a key moves onto it (a plan change inside the month
// being billed), and eu/0 is SIGKILLed (the reconciler closes its rows,
// --close-after 10s). Then the Stripe sink's passes run as
// `reconciler stripe-sync --continuous --granularity hour` runs them
// (sink.SyncStripe, incremental, with meter event summaries) against an
// HTTP fake Stripe that answers 500 for 25 hours across the end of the
// traffic's month.
//
// Time: the traffic and the ledger are on the real clock (the limiters
// stamp windows by their Redis's clock, which --clock-skew does not
// move). The month end and the outage exist on the sink's clock only: the
// passes run in this process with their now set to instants from 20
// minutes before the month ends to 25 hours after (the daemon's
// stripe-sync has no --now flag, and a binary with a moved clock costs a
// rebuild of every package), and the fake Stripe keeps its 24-hour
// identifiers, 35-day timestamps and invoice finalization by the same
// clock. After each pass the shipped alert rules' conditions are
// evaluated on the sink's gauges: whenever a complete period's invoice
// differs from the ledger, one must hold. A person settles the event held
// past Stripe's dedupe window by what Stripe holds (stripe-settle), and
// at the end each customer's invoice per month equals the ledger's net,
// exactly.
func TestBillingScenario(t *testing.T) {
	mode := requireMode(t)
	spec := scenarioSpec(mode)
	spec.ReconcilerFlags = []string{"--close-after", "10s"}
	began := time.Now()
	c := startScenarioCluster(t, spec)
	f := &Figures{Scenario: "billing", Mode: mode}
	const prefix = "billing-"
	keys := sortedKeys(billingCustomers)
	c.SetPlan("billing-basic", 40, 80)
	c.SetPlan("billing-pro", 100, 200)
	for i, k := range keys {
		c.AssignKey(k, map[bool]string{true: "billing-basic", false: "billing-pro"}[i < 3])
	}
	c.WaitPlan(30*time.Second, 40, 80, keys[:3]...)
	c.WaitPlan(30*time.Second, 100, 200, keys[3:]...)
	var load []KeyLoad
	for i, k := range keys {
		load = append(load, KeyLoad{Key: k, Rate: 30 + 10*float64(i)})
	}

	ctx := context.Background()
	pool, err := pgxpool.New(ctx, c.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	for _, k := range keys {
		if err := sink.SetStripeCustomer(ctx, pool, k, billingCustomers[k]); err != nil {
			t.Fatal(err)
		}
	}

	// The plan change a third in, the SIGKILL two thirds in.
	run := 15 * time.Second
	trafficFrom := time.Now().UTC()
	g, err := NewGenerator(c, Traffic{Keys: load, Endpoints: endpoints, Duration: run})
	if err != nil {
		t.Fatal(err)
	}
	g.Start()
	g.At(run / 3)
	c.SetPlan("billing-basic", 20, 40)
	c.AssignKey("billing-k-5", "billing-basic")
	changed := g.Elapsed()
	c.WaitPlan(20*time.Second, 20, 40, "billing-k-0", "billing-k-5")
	g.At(2 * run / 3)
	killed := c.CrashProcess("eu", 0)
	crashedAt := g.Elapsed()
	rec := g.Wait()
	trafficTo := time.Now().UTC()
	f.Duration = rec.end.Sub(rec.start)
	tot := rec.Totals()
	f.Decisions, f.AllowedCost, f.DegradedCost, f.DemandCost = tot.Decisions, tot.Allowed, tot.Degraded, tot.Allowed+tot.Rejected
	f.Failed, f.LostInCrash, f.FirstFailures = rec.Failures()
	// A note, not Setup: the report's heading is its first figure's Setup,
	// the failure table's cluster.
	f.Notes = append(f.Notes, fmt.Sprintf("%d regions × %d processes, --window %v; six keys (30 to 80 cost/s) of three Stripe customers on plans billing-basic (40/s) and billing-pro (100/s); "+
		"the Stripe sink hourly, incremental, finalization grace %v, against an HTTP fake Stripe down 25 h across the month end (sink clock); traffic %v.",
		len(spec.Regions), spec.Processes, spec.Window, billingGrace, run))
	f.check("failed API calls", f.Failed == 0, fmt.Sprintf("%d checks (%d in flight to the killed process)", f.Failed, f.LostInCrash), "0")
	crashed := map[string]bool{killed.ID(): true}
	lc := c.CompareLedger(rec, prefix, crashed, 30*time.Second)
	f.checkLedger(lc, "live processes")
	f.check("killed process: ledger ≤ what clients saw it allow", lc.CrashedClient > 0 && lc.CrashedLedger <= lc.CrashedClient,
		fmt.Sprintf("ledger %d, clients %d", lc.CrashedLedger, lc.CrashedClient), "≤")
	f.Notes = append(f.Notes, fmt.Sprintf("billing-basic lowered from 40/s to 20/s and billing-k-5 moved from billing-pro onto it at %.1f s; eu/0 (%s) SIGKILLed at %.1f s, its unreported tail %d of %d cost",
		changed.Seconds(), killed.ID(), crashedAt.Seconds(), lc.CrashedClient-lc.CrashedLedger, lc.CrashedClient))
	closedWait := time.Now()
	waitFinal(t, pool, prefix)
	f.Notes = append(f.Notes, fmt.Sprintf("every ledger row final (the killed process's closed by the reconciler) %.1f s after the traffic", time.Since(closedWait).Seconds()))

	// The sink's clock: the traffic's month ends at monthEnd; Stripe
	// answers 500 for 25 hours from half an hour before it (from the end
	// of the traffic's last hour if that is later: a run in a month's last
	// hour).
	monthEnd := export.Month.Next(export.Month.Start(trafficTo))
	months := [2]time.Time{export.Month.Start(trafficFrom), monthEnd}
	down := later(monthEnd.Add(-30*time.Minute), export.Hour.Next(export.Hour.Start(trafficTo)))
	back := down.Add(25 * time.Hour)
	clk := clock.NewManual(down)
	fake := StartFakeStripe(t, "api_units", clk, billingGrace)
	reg := prometheus.NewRegistry()
	m := sink.NewMetrics(reg)
	ex, err := export.New(pool, export.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	client := sink.NewStripeClient("sk_test_multiregion", fake.URL, &http.Client{Timeout: 5 * time.Second})
	cfg := sink.StripeConfig{Meter: fake.Meter, Granularity: export.Hour, FinalizationGrace: billingGrace, Clock: clk,
		Summaries: sink.NewStripeSummaries(client, fake.Meter), Incremental: true, Metrics: m}
	sinkName := sink.StripeSinkName(fake.Meter)
	pass := func(at time.Time) (sink.StripeStats, error) {
		clk.Set(at)
		fake.Down.Store(!at.Before(down) && at.Before(back))
		from, to := export.Month.Start(at), export.Hour.Next(export.Hour.Start(at))
		return sink.SyncStripe(ctx, pool, ex, client.V1BillingMeterEvents, cfg, from, to, at)
	}

	rules := shippedSinkAlerts(t)
	times := []time.Time{
		down.Add(10 * time.Minute),              // down: the first event refused
		monthEnd.Add(7 * time.Hour),             // down, the next month: unsent, nobody settling
		down.Add(23*time.Hour + 30*time.Minute), // down: past Stripe's dedupe window, held
		back.Add(10 * time.Minute),              // back: the rest sent, the held one waits for a person
	}
	var passNotes []string
	quiet := 0
	for i, at := range times {
		st, err := pass(at)
		g := gauges(m, sinkName)
		diff := invoiceDifferences(ctx, t, ex, fake, months, at)
		firing := rules.firing(g)
		passNotes = append(passNotes, fmt.Sprintf("sink at month end %+.1f h (Stripe %s): sent %d, resent %d, held %d, err %s; gauges %s; alert conditions %v; %d (customer, month) invoices differ from the ledger",
			at.Sub(monthEnd).Hours(), map[bool]string{true: "down", false: "up"}[fake.Down.Load()], st.Sent, st.Resent, len(st.Held), errText(err), g, sortedKeys(firing), len(diff)))
		if len(diff) > 0 && len(firing) == 0 {
			quiet++
		}
		switch i {
		case 0:
			f.check("first pass in the outage: refused, counted unsent", errors.Is(err, sink.ErrSinkRefused) && g.unsent >= 1 && g.keysDiffering >= 1,
				fmt.Sprintf("err %s; %s", errText(err), g), "refused, unsent ≥ 1")
		case 1:
			f.check("the next month's start, nobody settling: the unsent alert's condition holds", g.unsent >= 1 && firing["QuotaBillingSinkUnsent"],
				g.String(), "oldest unsent > 6 h")
		case 2:
			f.check("23 h into the outage: the event past the dedupe window held, alerted", g.held >= 1 && firing["QuotaBillingSinkEventsHeld"],
				g.String(), "held ≥ 1")
		case 3:
			f.check("Stripe back: the held event alerted until a person settles it", err == nil && g.held >= 1 && firing["QuotaBillingSinkEventsHeld"],
				fmt.Sprintf("err %s; %s", errText(err), g), "held ≥ 1")
		}
	}
	// A person settles each held event by what Stripe holds (its
	// identifier), as `reconciler stripe-settle` does.
	at := back.Add(15 * time.Minute)
	settled, err := settleHeld(ctx, pool, fake, sinkName, at)
	if err != nil {
		t.Fatal(err)
	}
	var st sink.StripeStats
	for range 6 {
		at = at.Add(10 * time.Minute)
		st, err = pass(at)
		g := gauges(m, sinkName)
		passNotes = append(passNotes, fmt.Sprintf("sink at month end %+.1f h, after the person: sent %d, resent %d, err %s; gauges %s",
			at.Sub(monthEnd).Hours(), st.Sent, st.Resent, errText(err), g))
		if err == nil && g.held == 0 && g.unsent == 0 && g.keysDiffering == 0 {
			break
		}
	}
	g2 := gauges(m, sinkName)
	f.check("after the person settled the held event: nothing unsent, nothing differing", err == nil && settled >= 1 && g2.held == 0 && g2.unsent == 0 && g2.keysDiffering == 0 && g2.oldestUnsent == 0,
		fmt.Sprintf("%d settled; err %s; %s", settled, errText(err), g2), "all 0")
	f.check("passes where an invoice differed from the ledger with no alert condition holding", quiet == 0,
		fmt.Sprintf("%d of %d", quiet, len(times)), "0")

	diff := invoiceDifferences(ctx, t, ex, fake, months, at)
	invoices, late := fake.Invoices()
	var lateTotal int64
	for _, v := range late {
		lateTotal += v
	}
	f.check("Stripe invoices == ledger net, per customer and month", len(diff) == 0 && lateTotal == 0 && len(invoices) == 3,
		describeInvoices(ctx, t, ex, invoices, months, at)+strings.Join(diff, "; "), "exact, nothing after finalization")
	f.Notes = append(f.Notes, passNotes...)
	f.Notes = append(f.Notes, fmt.Sprintf("meter event requests by answer: %v; scenario %.1f s", fake.Answers(), time.Since(began).Seconds()))
	addReport(f)
	gateChecks(t, "billing", mode, f, rec, false)
}

// waitFinal waits (up to a minute) until every ledger row of a key with
// prefix is final: its process's final report, or the reconciler's window
// closer.
func waitFinal(t *testing.T, pool *pgxpool.Pool, prefix string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		var open int
		err := pool.QueryRow(context.Background(), `SELECT count(*) FROM usage_reports WHERE starts_with(key, $1) AND NOT final`, prefix).Scan(&open)
		if err == nil && open == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("billing: %d ledger rows still not final after a minute (err %v)", open, err)
		}
		time.Sleep(250 * time.Millisecond) // poll interval of a deadline-bounded wait
	}
}

// sinkGauges are the sink's gauges the shipped alerts read.
type sinkGauges struct {
	held, unsent, keysDiffering, oldestUnsent float64
}

func (g sinkGauges) String() string {
	return fmt.Sprintf("held %.0f, unsent %.0f, keys differing %.0f, oldest unsent %.1f h", g.held, g.unsent, g.keysDiffering, g.oldestUnsent/3600)
}

func gauges(m *sink.Metrics, name string) sinkGauges {
	return sinkGauges{held: testutil.ToFloat64(m.Held(name)), unsent: testutil.ToFloat64(m.Unsent(name)),
		keysDiffering: testutil.ToFloat64(m.KeysDiffering(name)), oldestUnsent: testutil.ToFloat64(m.OldestUnsent(name))}
}

// sinkAlerts are the conditions of the shipped sink alerts, each checked
// to be in deploy/prometheus/quota-rules.yaml as written here.
type sinkAlerts map[string]func(sinkGauges) bool

func shippedSinkAlerts(t *testing.T) sinkAlerts {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(moduleRoot(), "deploy", "prometheus", "quota-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	exprs := map[string]string{
		"QuotaBillingSinkEventsHeld": "max by (sink) (quota_sink_held_events) > 0",
		"QuotaBillingSinkUnsent":     "max by (sink) (quota_sink_oldest_unsent_seconds) > 6 * 3600",
		"QuotaBillingSinkDifference": "max by (sink) (quota_sink_keys_differing) > 0",
	}
	for name, expr := range exprs {
		if !strings.Contains(string(b), "alert: "+name) || !strings.Contains(string(b), "expr: "+expr) {
			t.Fatalf("billing: quota-rules.yaml has no alert %s with expr %q: update the scenario with the rule", name, expr)
		}
	}
	return sinkAlerts{
		"QuotaBillingSinkEventsHeld": func(g sinkGauges) bool { return g.held > 0 },
		"QuotaBillingSinkUnsent":     func(g sinkGauges) bool { return g.oldestUnsent > 6*3600 },
		"QuotaBillingSinkDifference": func(g sinkGauges) bool { return g.keysDiffering > 0 },
	}
}

// firing returns the alerts whose condition holds on g.
func (a sinkAlerts) firing(g sinkGauges) map[string]bool {
	out := map[string]bool{}
	for name, cond := range a {
		if cond(g) {
			out[name] = true
		}
	}
	return out
}

// ledgerNet is the ledger's net per customer and UTC month of the
// scenario's keys, over the months in [months[0], months[1]).
func ledgerNet(ctx context.Context, t *testing.T, ex *export.Exporter, months [2]time.Time, now time.Time) map[string]map[time.Time]int64 {
	t.Helper()
	out := map[string]map[time.Time]int64{}
	q := export.Query{From: months[0], To: months[1], Granularity: export.Month, Prefix: "billing-", Now: now}
	err := ex.Export(ctx, q, func(rows []export.Row) error {
		for _, r := range rows {
			c, ok := billingCustomers[r.Key]
			if !ok {
				continue
			}
			if out[c] == nil {
				out[c] = map[time.Time]int64{}
			}
			out[c][r.PeriodStart] += r.Net
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// invoiceDifferences lists the (customer, month) whose invoice at the
// fake differs from the ledger's net.
func invoiceDifferences(ctx context.Context, t *testing.T, ex *export.Exporter, fake *FakeStripe, months [2]time.Time, now time.Time) []string {
	t.Helper()
	led := ledgerNet(ctx, t, ex, months, now)
	inv, _ := fake.Invoices()
	var out []string
	for _, c := range sortedKeys(billingCustomersByName()) {
		months := map[time.Time]bool{}
		for p := range led[c] {
			months[p] = true
		}
		for p := range inv[c] {
			months[p] = true
		}
		var ps []time.Time
		for p := range months {
			ps = append(ps, p)
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i].Before(ps[j]) })
		for _, p := range ps {
			if led[c][p] != inv[c][p] {
				out = append(out, fmt.Sprintf("%s %s: ledger net %d, invoiced %d", c, p.Format("2006-01"), led[c][p], inv[c][p]))
			}
		}
	}
	return out
}

// describeInvoices lists each customer's invoice and ledger net per month.
func describeInvoices(ctx context.Context, t *testing.T, ex *export.Exporter, inv map[string]map[time.Time]int64, months [2]time.Time, now time.Time) string {
	led := ledgerNet(ctx, t, ex, months, now)
	var parts []string
	for _, c := range sortedKeys(billingCustomersByName()) {
		for p := months[0]; p.Before(months[1]); p = export.Month.Next(p) {
			parts = append(parts, fmt.Sprintf("%s %s invoiced %d, ledger net %d", c, p.Format("2006-01"), inv[c][p], led[c][p]))
		}
	}
	return strings.Join(parts, "; ") + " "
}

func billingCustomersByName() map[string]bool {
	out := map[string]bool{}
	for _, c := range billingCustomers {
		out[c] = true
	}
	return out
}

// settleHeld settles each held event of the sink as a person does with
// `reconciler stripe-settle`: delivered if Stripe holds its identifier,
// else missing (sent again by the next pass). It returns how many.
func settleHeld(ctx context.Context, pool *pgxpool.Pool, fake *FakeStripe, sinkName string, now time.Time) (int, error) {
	rows, err := pool.Query(ctx, `SELECT event_id, frame->>'identifier' FROM billing_sink_events WHERE sink = $1 AND status = 'held'`, sinkName)
	if err != nil {
		return 0, err
	}
	type held struct{ id, identifier string }
	var hs []held
	for rows.Next() {
		var h held
		if err := rows.Scan(&h.id, &h.identifier); err != nil {
			rows.Close()
			return 0, err
		}
		hs = append(hs, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, h := range hs {
		if err := sink.SettleHeld(ctx, pool, sinkName, h.id, fake.Holds(h.identifier), now); err != nil {
			return 0, err
		}
	}
	return len(hs), nil
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// errText is err's message, or "none".
func errText(err error) string {
	if err == nil {
		return "none"
	}
	return err.Error()
}
