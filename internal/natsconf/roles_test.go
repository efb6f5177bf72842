package natsconf_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/internal/natsrole"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/planmirror"
	"github.com/quotaplatform/quota/ledger/quotabase"
	"github.com/quotaplatform/quota/ledger/quotabase/pgledger"
	"github.com/quotaplatform/quota/ledger/reconcile"
	"github.com/quotaplatform/quota/migrations"
	"github.com/quotaplatform/quota/participant"
	"github.com/quotaplatform/quota/region"
)

// client connects to n's eu server as user (password from n; "" for none),
// with user's inbox prefix (natsrole.Inbox) as every client of the shipped
// configuration does, and returns the connection and the first
// asynchronous errors the server sent it (permission violations arrive
// that way).
func client(t *testing.T, n *testserver.ShippedNATS, user string) (*nats.Conn, jetstream.JetStream, <-chan error) {
	t.Helper()
	return clientAt(t, n, "eu", user)
}

// clientAt is client on region's server.
func clientAt(t *testing.T, n *testserver.ShippedNATS, region, user string) (*nats.Conn, jetstream.JetStream, <-chan error) {
	t.Helper()
	errs := make(chan error, 16)
	opts := []nats.Option{nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	})}
	if user != "" {
		opts = append(opts, nats.UserInfo(user, n.Passwords[user]), natsrole.Inbox(user))
	}
	nc, err := nats.Connect(n.URL(region), opts...)
	if err != nil {
		t.Fatalf("connect as %q: %v", user, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return nc, js, errs
}

// refused waits for the server's permission violation naming subject.
func refused(t *testing.T, errs <-chan error, subject string) {
	t.Helper()
	select {
	case err := <-errs:
		if !errors.Is(err, nats.ErrPermissionViolation) || !strings.Contains(err.Error(), subject) {
			t.Fatalf("want a permissions violation on %s, got %v", subject, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the server did not refuse %s", subject)
	}
}

// Clients without credentials, or with another user's password, cannot
// connect to a server on the shipped configuration.
func TestShippedConfigRefusesStrangers(t *testing.T) {
	n := testserver.StartShippedNATS(t, "eu", "us")
	for _, tc := range []struct {
		name string
		opts []nats.Option
	}{
		{"no credentials", nil},
		{"unknown user", []nats.Option{nats.UserInfo("admin", "admin")}},
		{"another user's password", []nats.Option{nats.UserInfo("limiter-eu", n.Passwords["reconciler"])}},
		{"the gateway's credentials", []nats.Option{nats.UserInfo("gateway", n.Passwords["gateway"])}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := nats.Connect(n.URL("eu"), tc.opts...)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !errors.Is(err, nats.ErrAuthorization) {
				t.Fatalf("want an authorization violation, got %v", err)
			}
		})
	}
}

// The roles of the shipped configuration, exercised by the project's own
// code on a real nats-server: each role can do its job and nothing it does
// not need. A limiter of eu reports usage through ledger.Reporter and the
// reconciler writes it to Postgres; the control plane writes the catalogue
// and a limiter reads it; every forgery below is refused by the server.
func TestShippedRoles(t *testing.T) {
	n := testserver.StartShippedNATS(t, "eu", "us")
	// The clients' logs are shown only when the test fails: they say
	// which step waited (a loaded CI machine once took 60 s here).
	var clientLog testserver.LogBuffer
	quiet := slog.New(slog.NewTextHandler(&clientLog, &slog.HandlerOptions{Level: slog.LevelDebug}))
	defer func() {
		if t.Failed() {
			t.Log(n.LogTail("eu"))
			t.Log(n.LogTail("us"))
			t.Log("clients:\n" + clientLog.String())
		}
	}()
	// A bound on the whole test, far above what it takes at a load average
	// of 25 (136 s once, when 120 s ran out).
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// A holder of eu's limiter credentials tries to listen to the other
	// roles' inboxes (issue 28, item 4): the server refuses each
	// subscription, and the spy hears none of the replies below (the
	// reconciler's deliveries of every region's usage, quota bases asked
	// by us and by the control plane, JetStream answers).
	spy, _, spyErrs := client(t, n, "limiter-eu")
	var spies []*nats.Subscription
	for _, subject := range []string{"_INBOX.>", natsrole.InboxPrefix(natsrole.Reconciler) + ".>",
		natsrole.InboxPrefix(natsrole.Limiter("us")) + ".>", natsrole.InboxPrefix(natsrole.ControlPlane) + ".>"} {
		sub, err := spy.SubscribeSync(subject)
		if err != nil {
			t.Fatal(err)
		}
		spies = append(spies, sub)
		if err := spy.Flush(); err != nil {
			t.Fatal(err)
		}
		refused(t, spyErrs, subject)
	}
	defer func() {
		if err := spy.Flush(); err != nil {
			t.Fatal(err)
		}
		for _, sub := range spies {
			if n, _, err := sub.Pending(); err != nil || n != 0 {
				t.Errorf("limiter-eu heard %d replies on %s (%v)", n, sub.Subject, err)
			}
		}
	}()

	// The control plane creates and writes the catalogue; a limiter reads
	// it but never writes or creates it.
	cpNC, cpJS, cpErrs := client(t, n, "control-plane")
	limNC, limJS, limErrs := client(t, n, "limiter-eu")
	reader := startCatalog(t, limJS, true, quiet)
	writer := startCatalog(t, cpJS, false, quiet)
	for _, c := range []*catalog.Catalog{writer, reader} {
		if err := c.WaitSynced(ctx); err != nil {
			t.Fatalf("catalogue not synced: %v", err)
		}
	}
	if _, err := writer.PutPlan(ctx, "test", "gold", region.Plan{Rate: 5, Capacity: 10}); err != nil {
		t.Fatalf("control plane writes a plan: %v", err)
	}
	if _, err := writer.Assign(ctx, "test", "acct_1", "gold"); err != nil {
		t.Fatalf("control plane assigns a key: %v", err)
	}
	testserver.WaitFor(t, 10*time.Second, 10*time.Millisecond, func() error {
		if p, err := reader.Plan("acct_1"); err != nil || p.Capacity != 10 {
			return fmt.Errorf("the limiter's catalogue answers %v, %v", p, err)
		}
		return nil
	})
	if hist, err := reader.History(ctx, catalog.KindPlan, "gold"); err != nil || len(hist) != 1 {
		t.Fatalf("the limiter reads history: %d entries, %v", len(hist), err)
	}
	if _, err := reader.PutPlan(ctx, "test", "gold", region.Plan{Rate: 1e6, Capacity: 1e6}); !errors.Is(err, catalog.ErrReadOnly) {
		t.Fatalf("a read-only catalogue wrote: %v", err)
	}
	kv, err := limJS.KeyValue(ctx, "quota-catalog")
	if err != nil {
		t.Fatalf("the limiter binds the bucket: %v", err)
	}
	putCtx, putCancel := context.WithTimeout(ctx, 2*time.Second) // refused: no reply comes
	_, err = kv.Put(putCtx, "plan.gold", []byte(`{"rate":1000000,"capacity":1000000}`))
	putCancel()
	if err == nil {
		t.Fatal("the limiter's credentials wrote the catalogue")
	}
	refused(t, limErrs, "$KV.quota-catalog.plan.gold")
	// A refused request gets no reply: each waits out its own deadline.
	createCtx, createCancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = limJS.CreateKeyValue(createCtx, jetstream.KeyValueConfig{Bucket: "forged"})
	createCancel()
	if err == nil {
		t.Fatal("the limiter's credentials created a bucket")
	}
	refused(t, limErrs, "$JS.API.STREAM.CREATE.KV_forged")
	// Only the reconciler creates the usage stream (with its limits): a
	// limiter or the control plane that made it could set its own age and
	// size limits, and drop unconsumed usage.
	for _, c := range []struct {
		name string
		js   jetstream.JetStream
		errs <-chan error
	}{{"limiter", limJS, limErrs}, {"control plane", cpJS, cpErrs}} {
		streamCtx, streamCancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = c.js.CreateStream(streamCtx, jetstream.StreamConfig{Name: "QUOTA_USAGE", Subjects: []string{"quota.usage.>"},
			MaxAge: time.Minute})
		streamCancel()
		if err == nil {
			t.Fatalf("the %s's credentials created the usage stream", c.name)
		}
		refused(t, c.errs, "$JS.API.STREAM.CREATE.QUOTA_USAGE")
	}
	// reconciler stream-migrate updates and deletes the usage stream: only
	// the reconciler's credentials may; a limiter's or the control plane's
	// are refused.
	for _, c := range []struct {
		name string
		nc   *nats.Conn
		errs <-chan error
	}{{"limiter", limNC, limErrs}, {"control plane", cpNC, cpErrs}} {
		for _, subject := range []string{"$JS.API.STREAM.UPDATE.QUOTA_USAGE", "$JS.API.STREAM.DELETE.QUOTA_USAGE"} {
			if err := c.nc.Publish(subject, []byte("{}")); err != nil {
				t.Fatalf("%s: publish %s: %v", c.name, subject, err)
			}
			refused(t, c.errs, subject)
		}
	}

	// Usage: the limiter's Reporter publishes on its own subject, the
	// reconciler ingests it. The limiter cannot publish as another region.
	dbURL := testserver.NewDatabase(t)
	pool := migratedPool(t, dbURL)
	_, recJS, recErrs := client(t, n, "reconciler")
	cfg := reconcile.DefaultConfig()
	cfg.Logger = quiet
	cfg.Metrics = reconcile.NewMetrics(nil)
	// A reconciler of eu's part of the stream (reconciler --regions eu):
	// the role consumes through any durable of the usage stream.
	cfg.Regions, cfg.Durable = []string{"eu"}, "reconciler-eu"
	rec, err := reconcile.New(recJS, reconcile.NewWriter(pool), cfg)
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- rec.Run(runCtx) }()
	defer func() { stop(); <-done }()

	// Only the reconciler creates the usage stream; a limiter that reports
	// before it exists spools until a later flush finds it (this test
	// flushes once).
	// Each look has its own deadline: one asked while the cluster had no
	// meta leader (a loaded machine) gets no reply, and on the test's ctx
	// it waited until that ran out, long after the stream was there.
	testserver.WaitFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		lookCtx, lookCancel := context.WithTimeout(ctx, 5*time.Second)
		defer lookCancel()
		_, err := limJS.Stream(lookCtx, ledger.DefaultStream)
		return err
	})
	rcfg := ledger.DefaultConfig()
	rcfg.Region, rcfg.ProcessID, rcfg.SpoolDir, rcfg.Logger = "eu", "eu-1", t.TempDir(), quiet
	rep, err := ledger.NewReporter(limJS, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	rep.Record([]region.Usage{{Key: "acct_1", WindowStart: time.Now().Truncate(time.Minute), Spent: 7, Leased: 7}})
	if err := rep.Flush(ctx); err != nil {
		t.Fatalf("the limiter reports usage: %v", err)
	}
	quiet.Info("test: usage flushed; waiting for the ledger")
	testserver.WaitFor(t, 45*time.Second, 20*time.Millisecond, func() error {
		var spent int64
		err := pool.QueryRow(ctx, `SELECT coalesce(sum(spent), 0) FROM usage_reports WHERE key = 'acct_1'`).Scan(&spent)
		if err != nil || spent != 7 {
			return fmt.Errorf("ledger holds %d (%v), want 7", spent, err)
		}
		return nil
	})
	closeCtx, closeCancel := context.WithTimeout(ctx, 10*time.Second)
	defer closeCancel()
	if err := rep.Close(closeCtx); err != nil {
		t.Fatal(err)
	}

	// The reconciler reads the catalogue to mirror its plans into the
	// ledger (ledger/planmirror, as reconciler serve runs it); it cannot
	// write, create, purge or delete the bucket.
	mcfg := planmirror.DefaultConfig()
	mcfg.Logger, mcfg.RetryInterval = quiet, 50*time.Millisecond
	mirror, err := planmirror.New(recJS, pool, mcfg)
	if err != nil {
		t.Fatal(err)
	}
	mirrorCtx, stopMirror := context.WithCancel(ctx)
	mirrorDone := make(chan error, 1)
	go func() { mirrorDone <- mirror.Run(mirrorCtx) }()
	defer func() { stopMirror(); <-mirrorDone }()
	waitCtx, waitCancel := context.WithTimeout(ctx, 30*time.Second)
	err = mirror.WaitRevision(waitCtx, writer.Version())
	waitCancel()
	if err != nil {
		t.Fatalf("the reconciler mirrors the catalogue: %v", err)
	}
	var mirrored string
	if err := pool.QueryRow(ctx, `SELECT plan FROM quota_key_plans WHERE key = 'acct_1' AND NOT deleted`).Scan(&mirrored); err != nil || mirrored != "gold" {
		t.Fatalf("the reconciler's mirror holds plan %q for acct_1 (%v), want gold", mirrored, err)
	}
	recKV, err := recJS.KeyValue(ctx, "quota-catalog")
	if err != nil {
		t.Fatalf("the reconciler binds the bucket: %v", err)
	}
	putCtx, putCancel = context.WithTimeout(ctx, 2*time.Second) // refused: no reply comes
	_, err = recKV.Put(putCtx, "plan.Z29sZA", []byte(`{"kind":"plan","name":"gold","rate":1000000,"capacity":1000000}`))
	putCancel()
	if err == nil {
		t.Fatal("the reconciler's credentials wrote the catalogue")
	}
	refused(t, recErrs, "$KV.quota-catalog.plan.Z29sZA")
	createCtx, createCancel = context.WithTimeout(ctx, 2*time.Second)
	_, err = recJS.CreateKeyValue(createCtx, jetstream.KeyValueConfig{Bucket: "quota-catalog"})
	createCancel()
	if err == nil {
		t.Fatal("the reconciler's credentials created the catalogue bucket")
	}
	refused(t, recErrs, "$JS.API.STREAM.CREATE.KV_quota-catalog")
	for _, subject := range []string{"$JS.API.STREAM.PURGE.KV_quota-catalog", "$JS.API.STREAM.DELETE.KV_quota-catalog",
		"$JS.API.STREAM.UPDATE.KV_quota-catalog", "$JS.API.STREAM.MSG.DELETE.KV_quota-catalog"} {
		if err := recJS.Conn().Publish(subject, []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		if err := recJS.Conn().Flush(); err != nil {
			t.Fatal(err)
		}
		refused(t, recErrs, subject)
	}

	// Quota bases: a reconciler answers them from the ledger on us's
	// server (the ledger region's, as deployed); limiter-eu asks through
	// eu's, so the request and its reply cross the gateway; a limiter of
	// us (a participant, whose default quotabase.Client this is) and the
	// control plane ask too. Neither limiters nor the control plane may
	// subscribe to the subject: none can answer forged bases.
	recUS, _, _ := clientAt(t, n, "us", "reconciler")
	qcfg := quotabase.DefaultConfig()
	qcfg.Logger = quiet
	qpool, err := pgledger.NewPool(dbURL, qcfg)
	if err != nil {
		t.Fatal(err)
	}
	defer qpool.Close()
	qsrv, err := quotabase.NewServer(recUS, pgledger.New(qpool), qcfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := qsrv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := qsrv.Stop(ctx); err != nil {
			t.Error(err)
		}
	}()
	po := participant.DefaultOptions()
	po.Region, po.ProcessID, po.DataDir, po.Regions, po.Logger = "us", "us-1", t.TempDir(), []string{"eu", "us"}, quiet
	po.NATSURL, po.NATSOptions = n.URL("us"), []nats.Option{nats.UserInfo("limiter-us", n.Passwords["limiter-us"])}
	usLimiter, err := participant.New(po) // built, not started: its NATS connection is all this needs
	if err != nil {
		t.Fatal(err)
	}
	defer usLimiter.Close(ctx)
	// The participant dials with its role's inbox prefix: a control-plane
	// participant's replies come to the control plane's inboxes.
	po.ProcessID, po.DataDir, po.ControlPlane = "us-cp", t.TempDir(), true
	po.NATSOptions = []nats.Option{nats.UserInfo("control-plane", n.Passwords["control-plane"])}
	cpLimiter, err := participant.New(po)
	if err != nil {
		t.Fatal(err)
	}
	defer cpLimiter.Close(ctx)
	periodStart := time.Now().Truncate(time.Hour).Add(-time.Hour)
	for _, asker := range []struct {
		name  string
		bases region.QuotaBases
	}{
		{"limiter-eu, across the gateway", quotaBaseClient(t, limNC)},
		{"control-plane, across the gateway", quotaBaseClient(t, cpNC)},
		{"limiter-us, a participant's default client", usLimiter.QuotaBases()},
		{"control-plane, a participant's default client", cpLimiter.QuotaBases()},
	} {
		if asker.bases == nil {
			t.Fatalf("%s: no quota bases", asker.name)
		}
		// Until the queue subscription's interest has crossed the gateway
		// eu answers no responders.
		testserver.WaitFor(t, 20*time.Second, 20*time.Millisecond, func() error {
			base, err := asker.bases.QuotaBase(ctx, "acct_1", periodStart, periodStart.Add(3*time.Hour))
			if err != nil {
				return fmt.Errorf("%s: %w", asker.name, err)
			}
			if base.Total != 7 || base.ByRegion["eu"] != 7 {
				return fmt.Errorf("%s: base %+v, want 7 in eu", asker.name, base)
			}
			return nil
		})
	}
	for _, tc := range []struct {
		name  string
		nc    *nats.Conn
		errs  <-chan error
		queue string
	}{
		{"limiter subscribes to quota bases", limNC, limErrs, ""},
		{"limiter joins the reconcilers' queue", limNC, limErrs, quotabase.DefaultQueue},
		{"control plane subscribes to quota bases", cpNC, cpErrs, ""},
		{"control plane joins the reconcilers' queue", cpNC, cpErrs, quotabase.DefaultQueue},
		{"reconciler subscribes outside its queue", recJS.Conn(), recErrs, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub, err := tc.nc.QueueSubscribeSync(quotabase.DefaultSubject, tc.queue)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := tc.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			refused(t, tc.errs, quotabase.DefaultSubject)
		})
	}

	// No other role listens to another's inbox either.
	for _, tc := range []struct {
		name    string
		nc      *nats.Conn
		errs    <-chan error
		subject string
	}{
		{"control plane listens to the reconciler's inbox", cpNC, cpErrs, natsrole.InboxPrefix(natsrole.Reconciler) + ".>"},
		{"control plane listens to all inboxes", cpNC, cpErrs, "_INBOX.>"},
		{"reconciler listens to a limiter's inbox", recJS.Conn(), recErrs, natsrole.InboxPrefix(natsrole.Limiter("eu")) + ".>"},
		{"reconciler listens to all inboxes", recJS.Conn(), recErrs, "_INBOX.>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sub, err := tc.nc.SubscribeSync(tc.subject)
			if err != nil {
				t.Fatal(err)
			}
			defer sub.Unsubscribe()
			if err := tc.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			refused(t, tc.errs, tc.subject)
		})
	}

	forged := []byte(`{"key":"acct_victim","process_id":"us-1","region":"us","spent":1000000}`)
	for _, tc := range []struct {
		name    string
		nc      *nats.Conn
		errs    <-chan error
		subject string
	}{
		{"limiter reports as another region", limNC, limErrs, "quota.usage.us.us-1"},
		{"limiter gossips as another region", limNC, limErrs, "quota.gossip.us.us-1"},
		{"reconciler publishes usage", recJS.Conn(), recErrs, "quota.usage.eu.eu-1"},
		{"reconciler writes the catalogue", recJS.Conn(), recErrs, "$KV.quota-catalog.plan.gold"},
		{"limiter forges a reply", limNC, limErrs, "_INBOX.forged"},
		{"control plane forges a reply", cpNC, cpErrs, "_INBOX.forged"},
		{"reconciler publishes gossip", recJS.Conn(), recErrs, "quota.gossip.eu.eu-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.nc.Publish(tc.subject, forged); err != nil {
				t.Fatal(err)
			}
			if err := tc.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			refused(t, tc.errs, tc.subject)
		})
	}
	var spent int64
	if err := pool.QueryRow(ctx, `SELECT coalesce(sum(spent), 0) FROM usage_reports WHERE key = 'acct_victim'`).Scan(&spent); err != nil || spent != 0 {
		t.Fatalf("forged usage reached the ledger: %d (%v)", spent, err)
	}
	if _, err := reader.Plan("acct_victim"); !errors.Is(err, region.ErrUnknownPlan) {
		t.Fatalf("acct_victim has a plan: %v", err)
	}
}

// Gossip crosses between limiters of a region, and a limiter of one region
// hears another's, but only on the sender's own subject: a digest that
// eu's credentials publish as us never reaches anyone. The refused message
// is published before a permitted one on the same connection, so it would
// have arrived first.
func TestShippedGossipSubjects(t *testing.T) {
	n := testserver.StartShippedNATS(t, "eu", "us")
	eu, _, euErrs := client(t, n, "limiter-eu")
	us, _, _ := client(t, n, "limiter-us")
	sub, err := us.SubscribeSync("quota.gossip.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := us.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := eu.Publish("quota.gossip.us.us-1", []byte("forged")); err != nil {
		t.Fatal(err)
	}
	if err := eu.Publish("quota.gossip.eu.eu-1", []byte("genuine")); err != nil {
		t.Fatal(err)
	}
	if err := eu.Flush(); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.NextMsg(5 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Subject != "quota.gossip.eu.eu-1" || string(msg.Data) != "genuine" {
		t.Fatalf("first gossip heard: %s %q", msg.Subject, msg.Data)
	}
	refused(t, euErrs, "quota.gossip.us.us-1")
}

func quotaBaseClient(t *testing.T, nc *nats.Conn) *quotabase.Client {
	t.Helper()
	cfg := quotabase.DefaultClientConfig()
	cfg.Timeout = 5 * time.Second
	c, err := quotabase.NewClient(nc, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func startCatalog(t *testing.T, js jetstream.JetStream, readOnly bool, log *slog.Logger) *catalog.Catalog {
	t.Helper()
	cfg := catalog.DefaultConfig()
	cfg.ReadOnly, cfg.Logger, cfg.RetryInterval = readOnly, log, 50*time.Millisecond
	c, err := catalog.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Start(js); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	return c
}

func migratedPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	ctx := context.Background()
	if _, err := migrations.Migrate(ctx, url); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}
