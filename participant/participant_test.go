package participant_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/quotaplatform/quota/httplimit"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/ledger/quotabase"
	"github.com/quotaplatform/quota/participant"
	"github.com/quotaplatform/quota/region"
	"github.com/quotaplatform/quota/region/memstore"
)

// A closed participant leaves no goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testOptions are the defaults with a temporary data dir, quiet logs, and
// a store timeout for a loaded machine: these tests are about wiring, and a
// degraded decision would not be charged to the shared bucket.
func testOptions(t *testing.T) participant.Options {
	t.Helper()
	o := participant.DefaultOptions()
	o.DataDir = t.TempDir()
	o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	o.Limiter.StoreTimeout = 2 * time.Second
	return o
}

func open(t *testing.T, o participant.Options) *participant.Participant {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	p, err := participant.Open(ctx, o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { closeParticipant(t, p) })
	return p
}

func closeParticipant(t *testing.T, p *participant.Participant) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := p.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestOptionsErrorsNameFields: New refuses bad options, every bad field in
// one error, each named.
func TestOptionsErrorsNameFields(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*participant.Options)
		want   []string
	}{
		{"empty identity", func(o *participant.Options) { o.Region, o.ProcessID, o.DataDir = "", "", "" },
			[]string{"Region: must not be empty", "ProcessID: must not be empty", "DataDir: must not be empty"}},
		{"two stores", func(o *participant.Options) { o.Redis, o.Store = "redis://127.0.0.1:1", memstore.New(nil) },
			[]string{"Store: and Redis are exclusive"}},
		{"cluster without seeds", func(o *participant.Options) { o.RedisCluster = true }, []string{"RedisCluster: needs Redis"}},
		{"NATS options for the embedded server", func(o *participant.Options) { o.NATSOptions = []nats.Option{nats.UserInfo("u", "p")} },
			[]string{"NATSOptions: need NATSURL"}},
		{"a real NATS without a region set", func(o *participant.Options) { o.NATSURL = "nats://127.0.0.1:1" },
			[]string{"Regions: required with NATS or NATSURL"}},
		{"own region missing", func(o *participant.Options) { o.Region, o.Regions = "eu", []string{"us", "ap"} },
			[]string{`Regions: must include Region "eu"`}},
		{"regions and weights disagree", func(o *participant.Options) {
			o.Region, o.Regions, o.RegionWeights = "eu", []string{"eu", "us"}, map[string]float64{"eu": 1, "ap": 1}
		}, []string{"Regions and RegionWeights disagree"}},
		{"durations and counts", func(o *participant.Options) {
			o.Limiter.Window, o.Ledger.ReportInterval, o.Limiter.StoreTimeout, o.Limiter.ProcessEstimate, o.GossipInterval = 0, -1, 0, 0, 0
		}, []string{"Limiter.Window: must be positive", "Ledger.ReportInterval: must be positive", "Limiter.StoreTimeout: must be positive",
			"Limiter.ProcessEstimate: must be at least 1", "GossipInterval: must be positive"}},
		{"share floor past gossip's bound", func(o *participant.Options) { o.ShareFloor = 0.7 },
			[]string{"ShareFloor: must be in (0, 0.5]"}},
		{"half a default plan", func(o *participant.Options) { o.DefaultPlan = region.Plan{Rate: 10} },
			[]string{"DefaultPlan.Capacity: must be at least 1"}},
		{"placement", func(o *participant.Options) { o.Ledger.Stream.Cluster, o.CatalogReplicas = "eu.west", 9 },
			[]string{"Ledger.Stream.Cluster: ", "CatalogReplicas: must be 1 to 5"}},
		{"memberlist join without bind", func(o *participant.Options) { o.MemberlistJoin = []string{"127.0.0.1:7946"} },
			[]string{"MemberlistJoin: needs MemberlistBind"}},
		{"bad memberlist bind", func(o *participant.Options) { o.MemberlistBind = "nowhere" }, []string{"MemberlistBind: "}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := testOptions(t)
			tt.mutate(&o)
			p, err := participant.New(o)
			if err == nil {
				closeParticipant(t, p)
				t.Fatal("New accepted the options")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

// TestLifecycle: New starts nothing and Close releases it; Health follows
// the lifecycle; Start after Close is refused.
func TestLifecycle(t *testing.T) {
	o := testOptions(t)
	p, err := participant.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if h := p.Health(); h.Ready || h.Reason != "not started" {
		t.Fatalf("before Start: %+v", h)
	}
	ctx := context.Background()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if h := p.Health(); !h.Ready || !h.CatalogueLoaded || h.Degraded || h.Breaker != "closed" {
		t.Fatalf("after Start: %+v", h)
	}
	rec := httptest.NewRecorder()
	p.ReadyHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 200 || !strings.Contains(rec.Body.String(), `"ready":true`) {
		t.Fatalf("ReadyHandler: %d %s", rec.Code, rec.Body)
	}
	closeParticipant(t, p)
	if h := p.Health(); h.Ready || h.Reason != "shutting down" {
		t.Fatalf("after Close: %+v", h)
	}
	if err := p.Start(ctx); !errors.Is(err, participant.ErrClosed) {
		t.Fatalf("Start after Close: %v, want ErrClosed", err)
	}
	closeParticipant(t, p) // idempotent

	// Built and never started: Close releases the embedded server, the
	// connection and the spool (goleak checks the goroutines).
	p, err = participant.New(testOptions(t))
	if err != nil {
		t.Fatal(err)
	}
	closeParticipant(t, p)
}

// TestFleet: two participants share one Redis and one NATS, as two
// processes of a region do. A plan written through one reaches the other
// by push; both spend the same regional bucket; the middleware answers 429
// past the limit; metrics reach the registerer; and on Close both send
// final reports whose spent equals what was allowed. The caller's NATS
// connection survives the participant.
func TestFleet(t *testing.T) {
	rs := testserver.StartRedis(t)
	ns := testserver.StartNATS(t)
	nc, err := nats.Connect(ns.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// The reconciler's role creates the usage stream; the limiters only
	// publish to it.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ledger.EnsureStream(context.Background(), js, ledger.DefaultStreamConfig()); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	oa := testOptions(t)
	oa.Redis, oa.NATSURL, oa.Regions, oa.ControlPlane = "redis://"+rs.Addr+"/0", ns.URL, []string{"local"}, true
	oa.ProcessID, oa.Registerer = "proc-a", reg
	a := open(t, oa)
	ob := testOptions(t)
	ob.Redis, ob.NATS, ob.Regions = "redis://"+rs.Addr+"/0", nc, []string{"local"}
	ob.ProcessID = "proc-b"
	b := open(t, ob)

	ctx := context.Background()
	key := fmt.Sprintf("fleet_%d", time.Now().UnixNano())
	if _, err := a.Catalog().PutPlan(ctx, "test", "fleet", region.Plan{Rate: 0.01, Capacity: 6}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Catalog().PutCost(ctx, "test", "/heavy", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Catalog().Assign(ctx, "test", key, "fleet"); err != nil {
		t.Fatal(err)
	}
	testserver.WaitFor(t, 5*time.Second, 5*time.Millisecond, func() error {
		if name, _, err := b.Catalog().Resolve(key); err != nil || name != "fleet" {
			return fmt.Errorf("b resolves %q, %v", name, err)
		}
		if c, ok := b.Catalog().Cost("/heavy"); !ok || c != 2 {
			return errors.New("b has no cost for /heavy yet")
		}
		return nil
	})

	// Two decisions of cost 2 on a (one store call each way, leases of
	// the shared bucket), then b's middleware spends the rest and refuses.
	var allowed int64
	for range 2 {
		d, err := a.Limiter().Allow(ctx, key, 2)
		if err != nil || !d.Allowed || d.Degraded {
			t.Fatalf("a: %+v %v", d, err)
		}
		allowed += 2
	}
	mw, err := b.Middleware(httplimit.Config{})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /heavy", func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	h := mw(mux)
	var codes []int
	for range 3 {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/heavy", nil)
		req.Header.Set(httplimit.KeyHeader, key)
		h.ServeHTTP(rec, req)
		codes = append(codes, rec.Code)
		if rec.Code == 200 {
			allowed += 2
		}
	}
	if fmt.Sprint(codes) != "[200 429 429]" {
		t.Fatalf("b's middleware answered %v, want [200 429 429]: the bucket of 6 is shared", codes)
	}
	if allowed != 6 {
		t.Fatalf("allowed %d, want the capacity, 6", allowed)
	}
	n, err := testutilGather(reg, "quota_decisions_total")
	if err != nil || n == 0 {
		t.Fatalf("a's registerer has no quota_decisions_total: %v", err)
	}

	// Close sends finals; the caller's connection stays open.
	closeParticipant(t, a)
	closeParticipant(t, b)
	if !nc.IsConnected() {
		t.Fatal("Close closed the caller's NATS connection")
	}
	spent, finals := readLedger(t, nc, key)
	if spent != allowed || finals != 2 {
		t.Fatalf("ledger: spent %d with %d final processes, want %d from 2", spent, finals, allowed)
	}
}

// testutilGather counts the series of one metric family in reg.
func testutilGather(reg *prometheus.Registry, name string) (int, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric()), nil
		}
	}
	return 0, fmt.Errorf("no %s", name)
}

// readLedger reads the whole usage stream and returns key's spent, summed
// over processes (each process's reports are cumulative: its last counts),
// and how many processes sent a final report for it.
func readLedger(t *testing.T, nc *nats.Conn, key string) (spent int64, finals int) {
	t.Helper()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := js.Stream(ctx, ledger.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	last := map[string]int64{}
	final := map[string]bool{}
	// By sequence, not with a consumer: the work-queue stream takes no
	// consumer beside the reconciler's, and this read must not ack.
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := stream.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		reps, err := ledger.DecodeMessage(m.Header.Get(ledger.HeaderEncoding), m.Data)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range reps {
			if r.Key == key {
				last[r.ProcessID] = max(last[r.ProcessID], r.Spent)
				final[r.ProcessID] = final[r.ProcessID] || r.Final
			}
		}
	}
	for p, s := range last {
		spent += s
		if final[p] {
			finals++
		}
	}
	return spent, finals
}

// The participant is a library: it must work without fx.
func TestNoFx(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "github.com/quotaplatform/quota/participant").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "go.uber.org/fx") || strings.HasPrefix(dep, "go.uber.org/dig") {
			t.Errorf("participant imports %s", dep)
		}
	}
}

// TestOpenFailsCleanly: a part that cannot start (memberlist's address is
// taken) fails Open with an error naming the part, after the parts started
// before it (gossip, catalogue, reporter) were stopped again: goleak finds
// none of their goroutines, and the data dir can be opened again at once.
func TestOpenFailsCleanly(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	o := testOptions(t)
	o.MemberlistBind = ln.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	p, err := participant.Open(ctx, o)
	if err == nil {
		closeParticipant(t, p)
		t.Fatal("Open succeeded on a taken memberlist address")
	}
	if !strings.Contains(err.Error(), "start membership") {
		t.Fatalf("error %q does not name the part that failed", err)
	}
	o.MemberlistBind = ""
	open(t, o) // the embedded server's store and the spool were released
}

// TestQuotaBasesAndHorizon: with embedded NATS there is no reconciler and
// no quota-base client; on a real NATS the participant asks on its own
// connection (with no reconciler there the answer is ErrNoReconciler);
// Options.QuotaBases replaces the client; IdempotencyHorizon reaches the
// limiter.
func TestQuotaBasesAndHorizon(t *testing.T) {
	o := testOptions(t)
	o.Limiter.IdempotencyHorizon = time.Hour
	p := open(t, o)
	if p.QuotaBases() != nil {
		t.Fatalf("embedded NATS: quota bases %T, want none", p.QuotaBases())
	}
	if h := p.Limiter().IdempotencyHorizon(); h != time.Hour || p.LimiterConfig().IdempotencyHorizon != time.Hour {
		t.Fatalf("limiter horizon %v (config %v), want 1h", h, p.LimiterConfig().IdempotencyHorizon)
	}

	ns := testserver.StartNATS(t)
	o = testOptions(t)
	o.NATSURL, o.Regions = ns.URL, []string{"local"}
	q := open(t, o)
	if q.QuotaBases() == nil {
		t.Fatal("a real NATS: no quota-base client")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	from := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	if _, err := q.QuotaBases().QuotaBase(ctx, "acct_1", from, from.AddDate(0, 1, 0)); !errors.Is(err, quotabase.ErrNoReconciler) {
		t.Fatalf("no reconciler on the NATS: err %v, want ErrNoReconciler", err)
	}

	own, _ := q.QuotaBases().(*quotabase.Client)
	o = testOptions(t)
	o.NATSURL, o.Regions, o.QuotaBases = ns.URL, []string{"local"}, own
	if r := open(t, o); r.QuotaBases() != region.QuotaBases(own) {
		t.Fatalf("Options.QuotaBases not used: %T", r.QuotaBases())
	}
	o = testOptions(t)
	o.Limiter.IdempotencyHorizon = 0
	if _, err := participant.New(o); err == nil || !strings.Contains(err.Error(), "Limiter.IdempotencyHorizon") {
		t.Fatalf("IdempotencyHorizon 0: %v", err)
	}
}
