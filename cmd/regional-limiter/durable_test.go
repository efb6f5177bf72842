package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/fx"

	"github.com/quotaplatform/quota/internal/limitapi"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/ledger"
)

// usageJetStream connects to url and creates the usage stream there, as
// the reconciler does (limiters only check that it exists).
func usageJetStream(t *testing.T, url string, create bool) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if create {
		createUsageStream(t, js)
	}
	return js
}

func createUsageStream(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	if _, err := ledger.EnsureStream(context.Background(), js, ledger.DefaultStreamConfig()); err != nil {
		t.Fatal(err)
	}
}

// keyUsage sums, over the processes that reported key, the latest report
// of each (process, window) in the usage stream.
func keyUsage(t *testing.T, js jetstream.JetStream, key string) (ledger.Report, error) {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, ledger.DefaultStream)
	if err != nil {
		return ledger.Report{}, err
	}
	info, err := s.Info(ctx)
	if err != nil {
		return ledger.Report{}, err
	}
	latest := map[string]ledger.Report{}
	// By sequence, not with a consumer: the work-queue stream takes no
	// consumer beside the reconciler's, and this read must not ack.
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			return ledger.Report{}, err
		}
		reps, err := ledger.DecodeMessage(m.Header.Get(ledger.HeaderEncoding), m.Data)
		if err != nil {
			t.Fatalf("the stream holds an invalid message: %v", err)
		}
		for _, r := range reps {
			id := r.ProcessID + "|" + r.WindowStart.String()
			if old, ok := latest[id]; r.Key == key && (!ok || r.Seq > old.Seq) {
				latest[id] = r
			}
		}
	}
	var sum ledger.Report
	for _, r := range latest {
		sum.Spent += r.Spent
		sum.Refunded += r.Refunded
		sum.Charged += r.Charged
		sum.Final = sum.Final || r.Final
	}
	return sum, nil
}

// daemonArgsEnv, set, makes TestRefundSurvivesSIGKILL run the daemon's
// main with these flags (space-separated) instead of the test: the test
// starts its own binary as a real daemon process, to kill it.
const daemonArgsEnv = "QUOTA_TEST_DAEMON_ARGS"

// A refund answered by a daemon that is killed (SIGKILL) right after the
// answer reaches the usage stream: it was published and acknowledged
// before the answer, or, with no stream to take it yet, written to the
// spool and synced, which the restarted daemon sends once the stream
// exists. No flush ran: the process had no chance to.
func TestRefundSurvivesSIGKILL(t *testing.T) {
	if args := os.Getenv(daemonArgsEnv); args != "" {
		os.Args = append([]string{"regional-limiter"}, strings.Fields(args)...)
		main() // until killed
		return
	}
	rs := testserver.StartRedis(t)
	for _, tc := range []struct {
		name   string
		stream bool // the usage stream exists when the refund is answered
	}{{"published", true}, {"spooled", false}} {
		t.Run(tc.name, func(t *testing.T) {
			ns := testserver.StartNATS(t)
			js := usageJetStream(t, ns.URL, tc.stream)
			dir := t.TempDir()
			key := fmt.Sprintf("acct_kill_%s_%d", tc.name, time.Now().UnixNano())

			d := startDaemonProcess(t, rs.Addr, ns.URL, dir)
			d.mustCall(t, "POST", "/v1/allow", `{"key":"`+key+`","cost":5,"request_id":"ord-1"}`, false, 200)
			if r := d.mustCall(t, "POST", "/v1/refund", `{"key":"`+key+`","cost":3,"request_id":"ord-1"}`, false, 200); r.body["refunded"] != 3.0 {
				t.Fatalf("refund: %s", r.raw)
			}
			d.kill(t)

			if tc.stream {
				// Already published: no process is left to send anything.
				got, err := keyUsage(t, js, key)
				if err != nil || got.Refunded != 3 {
					t.Fatalf("the stream after the kill: %+v %v, want the refund of 3", got, err)
				}
				return
			}
			if _, err := js.Stream(context.Background(), ledger.DefaultStream); !errors.Is(err, jetstream.ErrStreamNotFound) {
				t.Fatalf("the limiter created the usage stream (lookup: %v); only the reconciler's role does", err)
			}
			createUsageStream(t, js) // the reconciler starts
			d = startDaemonProcess(t, rs.Addr, ns.URL, dir)
			testserver.WaitFor(t, 20*time.Second, 50*time.Millisecond, func() error {
				got, err := keyUsage(t, js, key)
				if err != nil || got.Refunded != 3 {
					return fmt.Errorf("usage of the key in the stream: %+v %v, want the refund of 3", got, err)
				}
				return nil
			})
			d.kill(t)
		})
	}
}

// daemonProcess is the daemon's main in a child process.
type daemonProcess struct {
	daemon
	cmd *exec.Cmd
}

func startDaemonProcess(t *testing.T, redisAddr, natsURL, dir string) *daemonProcess {
	t.Helper()
	addr := fmt.Sprintf("127.0.0.1:%d", testserver.FreePort(t))
	args := []string{"--listen", addr, "--redis", "redis://" + redisAddr + "/0", "--nats", natsURL, "--regions", "local",
		"--data-dir", dir, "--control-plane", "--admin-token", adminToken, "--default-rate", "10", "--default-capacity", "100",
		"--store-timeout", "2s", "--log-level", "warn", "--process-id", "killed"}
	cmd := exec.Command(os.Args[0], "-test.run=^TestRefundSurvivesSIGKILL$", "-test.count=1")
	cmd.Env = append(os.Environ(), daemonArgsEnv+"="+strings.Join(args, " "))
	cmd.Stdout, cmd.Stderr = testLogWriter{t}, testLogWriter{t}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemonProcess{daemon: daemon{base: "http://" + addr}, cmd: cmd}
	t.Cleanup(func() { d.kill(t) })
	testserver.WaitFor(t, 30*time.Second, 20*time.Millisecond, func() error {
		resp, err := http.Get(d.base + "/readyz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("/readyz %d", resp.StatusCode)
		}
		return nil
	})
	return d
}

// kill sends SIGKILL and waits for the process to end.
func (d *daemonProcess) kill(t *testing.T) {
	if d.cmd == nil {
		return
	}
	if err := d.cmd.Process.Kill(); err != nil {
		t.Errorf("kill: %v", err)
	}
	_ = d.cmd.Wait()
	d.cmd = nil
}

// The limiter's last flush reaches the stream although a request still in
// flight at shutdown spends the whole stop deadline: the HTTP drain is
// cut at --drain-timeout, and the flush has --flush-timeout of its own.
func TestStopFlushesDespiteASlowRequest(t *testing.T) {
	ns := testserver.StartNATS(t)
	js := usageJetStream(t, ns.URL, true)
	o := testOptions(t, "", ns.URL, t.TempDir())
	o.Ledger.ReportInterval = time.Hour // only the final reports at stop are sent
	o.DrainTimeout, o.FlushTimeout = 500*time.Millisecond, 10*time.Second
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	slow := fx.Decorate(func(rt routeTable) routeTable {
		return append(rt, limitapi.Route{Pattern: "GET /test/slow", Access: limitapi.AccessAnyone, Caller: "this test",
			Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(entered)
				select {
				case <-release:
				case <-r.Context().Done():
				}
			})})
	})
	d := startDaemon(t, o, slow)
	key := fmt.Sprintf("acct_stop_%d", time.Now().UnixNano())
	d.mustCall(t, "PUT", "/v1/limits/stop", `{"rate":10,"capacity":100}`, true, 204)
	d.mustCall(t, "PUT", "/v1/keys/"+key, `{"plan":"stop"}`, true, 204)
	for range 7 {
		d.mustCall(t, "POST", "/v1/allow", `{"key":"`+key+`","cost":2}`, false, 200)
	}
	go func() {
		if resp, err := http.Get(d.base + "/test/slow"); err == nil {
			resp.Body.Close()
		}
	}()
	<-entered

	// A stop deadline the slow request outlasts.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	err := d.app.Stop(ctx)
	t.Logf("stop: %v", err)
	d.app = nil
	testserver.WaitFor(t, 5*time.Second, 50*time.Millisecond, func() error {
		got, err := keyUsage(t, js, key)
		if err != nil || got.Spent != 14 || !got.Final {
			return fmt.Errorf("usage of the key in the stream: %+v %v, want a final report of spent 14", got, err)
		}
		return nil
	})
}

// With embedded NATS (make run: no reconciler) the daemon owns the server,
// so it creates the usage stream itself, with no age limit, and its usage
// is kept there.
func TestEmbeddedDaemonKeepsUsageInItsStream(t *testing.T) {
	o := testOptions(t, "", "", t.TempDir())
	o.Ledger.ReportInterval = 100 * time.Millisecond
	var js jetstream.JetStream
	d := startDaemon(t, o, fx.Populate(&js))
	d.mustCall(t, "POST", "/v1/allow", `{"key":"acct_embedded","cost":3}`, false, 200)
	testserver.WaitFor(t, 10*time.Second, 50*time.Millisecond, func() error {
		got, err := keyUsage(t, js, "acct_embedded")
		if err != nil || got.Spent != 3 {
			return fmt.Errorf("usage in the embedded stream: %+v %v, want spent 3", got, err)
		}
		return nil
	})
	s, err := js.Stream(context.Background(), ledger.DefaultStream)
	if err != nil {
		t.Fatal(err)
	}
	if c := s.CachedInfo().Config; c.MaxAge != 0 {
		t.Fatalf("the embedded usage stream ages reports out after %v", c.MaxAge)
	}
}
