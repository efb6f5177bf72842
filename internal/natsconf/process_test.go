package natsconf_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/quotaplatform/quota/internal/natsconf"
	"github.com/quotaplatform/quota/internal/natsrole"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
	"github.com/quotaplatform/quota/region"
)

// One credential per limiter process (issue 37, item 6). With eu's
// processes listed (Params.Processes, as the deploy lists its pods), the
// real nats-server on the shipped configuration refuses eu-1's credential
// on eu-2's usage and gossip subjects and inboxes, and on the region's
// other subjects; the control plane (a limiter of eu) cannot publish as
// either; the region-wide user no longer exists. eu-1's own Reporter still
// lands its reports (incarnation included) on its own subject, and its
// gossip reaches eu-2.
func TestProcessCredentialRefusedOnAnotherProcessesSubject(t *testing.T) {
	n := testserver.StartShippedNATSProcesses(t, map[string][]string{"eu": {"eu-1", "eu-2"}}, "eu", "us")
	defer func() {
		if t.Failed() {
			t.Log(n.LogTail("eu"))
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	eu1 := natsrole.LimiterProcess("eu", "eu-1")
	eu1NC, eu1JS, eu1Errs := client(t, n, eu1)
	eu2NC, _, _ := client(t, n, natsrole.LimiterProcess("eu", "eu-2"))
	cpNC, cpJS, cpErrs := client(t, n, natsrole.ControlPlane)

	// The reconciler creates the usage stream; eu-1's Reporter reports
	// through it on eu-1's subject, as the daemon does.
	_, recJS, _ := client(t, n, natsrole.Reconciler)
	stream, err := ledger.EnsureStream(ctx, recJS, ledger.DefaultStreamConfig())
	if err != nil {
		t.Fatal(err)
	}
	rcfg := ledger.DefaultConfig()
	rcfg.Region, rcfg.ProcessID, rcfg.SpoolDir = "eu", "eu-1", t.TempDir()
	rep, err := ledger.NewReporter(eu1JS, rcfg)
	if err != nil {
		t.Fatal(err)
	}
	rep.Record([]region.Usage{{Key: "acct_1", WindowStart: time.Now().Truncate(time.Minute), Spent: 3, Leased: 3}})
	if err := rep.Flush(ctx); err != nil {
		t.Fatalf("eu-1 reports on its own subject: %v", err)
	}
	if err := rep.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ack, err := cpJS.Publish(ctx, "quota.usage.eu.control-plane-7d9f", []byte("{}"))
	if err != nil || ack.Duplicate {
		t.Fatalf("the control plane publishes on its own subject: %+v, %v", ack, err)
	}

	gossip, err := eu2NC.SubscribeSync("quota.gossip.>")
	if err != nil {
		t.Fatal(err)
	}
	if err := eu2NC.Flush(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		nc      *nats.Conn
		errs    <-chan error
		subject string
		sub     bool
	}{
		{"eu-1 reports as eu-2", eu1NC, eu1Errs, "quota.usage.eu.eu-2", false},
		{"eu-1 reports on the region's subject", eu1NC, eu1Errs, "quota.usage.eu", false},
		{"eu-1 reports below its subject", eu1NC, eu1Errs, "quota.usage.eu.eu-1.x", false},
		{"eu-1 gossips as eu-2", eu1NC, eu1Errs, "quota.gossip.eu.eu-2", false},
		{"eu-1 gossips as an invented process", eu1NC, eu1Errs, "quota.gossip.eu.squatter-17", false},
		{"eu-1 listens to eu-2's inbox", eu1NC, eu1Errs, natsrole.InboxPrefix(natsrole.LimiterProcess("eu", "eu-2")) + ".>", true},
		{"eu-1 listens to the region's inboxes", eu1NC, eu1Errs, natsrole.InboxPrefix(natsrole.Limiter("eu")) + ".>", true},
		{"the control plane reports as eu-1", cpNC, cpErrs, "quota.usage.eu.eu-1", false},
		{"the control plane gossips as eu-2", cpNC, cpErrs, "quota.gossip.eu.eu-2", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.sub {
				sub, err := tc.nc.SubscribeSync(tc.subject)
				if err != nil {
					t.Fatal(err)
				}
				defer sub.Unsubscribe()
			} else if err := tc.nc.Publish(tc.subject, []byte(`{"key":"acct_1","process_id":"eu-2","region":"eu","spent":1000000}`)); err != nil {
				t.Fatal(err)
			}
			if err := tc.nc.Flush(); err != nil {
				t.Fatal(err)
			}
			refused(t, tc.errs, tc.subject)
		})
	}
	// eu-1's own gossip, published after its forgeries on the same
	// connection, is the first eu-2 hears.
	if err := eu1NC.Publish("quota.gossip.eu.eu-1", []byte("genuine")); err != nil {
		t.Fatal(err)
	}
	if err := eu1NC.Flush(); err != nil {
		t.Fatal(err)
	}
	msg, err := gossip.NextMsg(5 * time.Second)
	if err != nil || msg.Subject != "quota.gossip.eu.eu-1" || string(msg.Data) != "genuine" {
		t.Fatalf("first gossip eu-2 heard: %v, %v", msg, err)
	}

	info, err := stream.Info(ctx, jetstream.WithSubjectFilter("quota.usage.>"))
	if err != nil {
		t.Fatal(err)
	}
	// eu-1's flush and its Close's final report; the control plane's one.
	got := info.State.Subjects
	if len(got) != 2 || got["quota.usage.eu.eu-1"] < 1 || got["quota.usage.eu.control-plane-7d9f"] != 1 {
		t.Fatalf("usage stream holds %v, want messages on eu-1's and the control plane's subjects only", got)
	}

	// The region's shared user is gone: nothing a pod holds logs in as
	// every process of the region.
	if _, err := nats.Connect(n.URL("eu"), nats.UserInfo(natsrole.Limiter("eu"), n.Passwords[eu1])); !errors.Is(err, nats.ErrAuthorization) {
		t.Fatalf("the region-wide limiter user connects: %v", err)
	}
	t.Logf("eu-1's credential: %d stream messages, all on its own subject; 9 attempts on other processes' subjects refused by the server", got["quota.usage.eu.eu-1"])
}

// Process names become users, subjects and environment variables: the
// configuration refuses one that is not a DNS label, listed twice or of an
// unknown region, naming it.
func TestProcessesValidated(t *testing.T) {
	for _, tc := range []struct {
		name      string
		processes map[string][]string
		want      string
	}{
		{"dot", map[string][]string{"eu": {"eu.1"}}, `"eu.1" is not a DNS label`},
		{"wildcard", map[string][]string{"eu": {"*"}}, `"*" is not a DNS label`},
		{"upper case", map[string][]string{"eu": {"EU-1"}}, `"EU-1" is not a DNS label`},
		{"empty", map[string][]string{"eu": {""}}, `"" is not a DNS label`},
		{"twice", map[string][]string{"eu": {"eu-1", "eu-1"}}, `"eu-1" listed twice`},
		{"unknown region", map[string][]string{"ap": {"ap-1"}}, `Processes["ap"]: not one of Regions`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := natsconf.Render(natsconf.Params{Name: "eu", Regions: []string{"eu", "us"}, ControlRegion: "eu",
				StoreDir: t.TempDir(), Processes: tc.processes})
			if err == nil || !contains(err.Error(), tc.want) {
				t.Fatalf("Render = %v, want an error with %q", err, tc.want)
			}
		})
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
