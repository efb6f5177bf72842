package main

import (
	"context"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/internal/edge"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
)

// TestRegionModulesWired: the daemon reports usage to the ledger stream
// (final reports on a graceful stop, spent equal to what clients were
// allowed), serves the gossip shares on /debug/shares and GET /v1/keys,
// and runs an encrypted memberlist.
func TestRegionModulesWired(t *testing.T) {
	srv := testserver.StartNATS(t)
	usageJetStream(t, srv.URL, true) // the reconciler's role creates the usage stream
	o := testOptions(t, "", srv.URL, t.TempDir())
	o.GossipInterval = 100 * time.Millisecond
	o.MemberlistBind = "127.0.0.1:0"
	o.MemberlistKey = edge.Secret(base64.StdEncoding.EncodeToString([]byte("0123456789abcdef0123456789abcdef")))
	o.ProcessID = "proc-a"
	o.HotKeyMetrics = 3
	d := startDaemon(t, o)

	var allowed float64
	for i := 0; i < 30; i++ {
		r := d.mustCall(t, "POST", "/v1/allow", `{"key":"acct_ledger","cost":2}`, false, 200)
		if r.body["allowed"] == true {
			allowed += 2
		}
	}
	if allowed == 0 {
		t.Fatal("nothing allowed: the test proves nothing")
	}
	testserver.WaitFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		r := d.mustCall(t, "GET", "/debug/shares", "", true, 200)
		if _, ok := r.body["regions"]; !ok {
			return errNotYet("no regions in /debug/shares: " + r.raw)
		}
		return nil
	})
	// The hottest key is named behind a token, and /metrics shows it by
	// rank only.
	testserver.WaitFor(t, 5*time.Second, 20*time.Millisecond, func() error {
		r := d.mustCall(t, "GET", "/v1/hotkeys?k=1", "", true, 200)
		keys, _ := r.body["keys"].([]any)
		if len(keys) != 1 || keys[0].(map[string]any)["key"] != "acct_ledger" || keys[0].(map[string]any)["demand"].(float64) <= 0 {
			return errNotYet("hot keys: " + r.raw)
		}
		return nil
	})
	d.mustCall(t, "GET", "/v1/hotkeys", "", false, 401)
	if r := d.mustCall(t, "GET", "/v1/hotkeys?k=0", "", true, 400); r.body["field"] != "k" {
		t.Fatalf("bad k: %s, want field k", r.raw)
	}
	if r := d.mustCall(t, "GET", "/v1/hotkeys?region=mars", "", true, 400); r.body["field"] != "region" {
		t.Fatalf("unknown region: %s, want field region", r.raw)
	}
	metrics := d.call(t, "GET", "/metrics", "", false).raw
	if !strings.Contains(metrics, `quota_hotkey_demand_share{rank="1"}`) || strings.Contains(metrics, "acct_ledger") {
		t.Fatalf("/metrics: want quota_hotkey_demand_share by rank and no key")
	}
	k := d.mustCall(t, "GET", "/v1/keys/acct_ledger", "", true, 200)
	shares, _ := k.body["shares"].(map[string]any)
	if shares["local"] != 1.0 {
		t.Fatalf("GET /v1/keys shares = %v, want local: 1 for a lone region", k.body["shares"])
	}
	d.stop(t) // graceful: the limiter drains into the reporter, which sends finals

	nc, err := nats.Connect(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
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
	var spent int64
	final := false
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
		for _, rep := range reps {
			if rep.Key == "acct_ledger" {
				spent = max(spent, rep.Spent) // reports are cumulative
				final = final || rep.Final
			}
		}
	}
	if float64(spent) != allowed || !final {
		t.Fatalf("ledger stream: spent %d final %v, want %v final", spent, final, allowed)
	}
}

type errNotYet string

func (e errNotYet) Error() string { return string(e) }
