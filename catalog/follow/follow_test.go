package follow_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/quotaplatform/quota/catalog/follow"
	"github.com/quotaplatform/quota/internal/testserver"
)

// Run's goroutine and the watch's must end with ctx.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const bucket = "follow-test"

// recorder is a Handler that turns every call into a line on events:
// "read a=1@1", "loaded 2", "change a=3@3", "delete a@4", "restart resync"
// or "restart <error>". Bind fails with each error of failBinds first,
// and Change with each of failChanges.
type recorder struct {
	events      chan string
	failBinds   []error
	failChanges []error
	more        bool // the last Change's
}

func newRecorder() *recorder { return &recorder{events: make(chan string, 1000)} }

func (r *recorder) Bind(ctx context.Context, js jetstream.JetStream) (jetstream.KeyValue, error) {
	if len(r.failBinds) > 0 {
		err := r.failBinds[0]
		r.failBinds = r.failBinds[1:]
		return nil, err
	}
	return js.KeyValue(ctx, bucket)
}

func entry(kve jetstream.KeyValueEntry) string {
	if kve.Operation() != jetstream.KeyValuePut {
		return fmt.Sprintf("delete %s@%d", kve.Key(), kve.Revision())
	}
	return fmt.Sprintf("%s=%s@%d", kve.Key(), kve.Value(), kve.Revision())
}

func (r *recorder) Read(kve jetstream.KeyValueEntry) { r.events <- "read " + entry(kve) }

func (r *recorder) Loaded(_ context.Context, revision uint64, _ bool) error {
	r.events <- fmt.Sprintf("loaded %d", revision)
	return nil
}

func (r *recorder) Change(_ context.Context, kve jetstream.KeyValueEntry, more bool) error {
	r.more = more
	if len(r.failChanges) > 0 {
		err := r.failChanges[0]
		r.failChanges = r.failChanges[1:]
		r.events <- "failed change " + entry(kve)
		return err
	}
	r.events <- "change " + entry(kve)
	return nil
}

func (r *recorder) Restart(err error) {
	if errors.Is(err, follow.ErrResync) {
		r.events <- "restart resync"
		return
	}
	r.events <- "restart " + err.Error()
}

// expect reads the next len(want) events and compares them with want.
func (r *recorder) expect(t *testing.T, want ...string) {
	t.Helper()
	for i, w := range want {
		select {
		case got := <-r.events:
			if got != w {
				t.Fatalf("event %d: got %q, want %q", i, got, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("event %d: nothing within 10s, want %q", i, w)
		}
	}
}

// env is a private NATS server with the bucket.
type env struct {
	ns *testserver.NATS
	js jetstream.JetStream
	kv jetstream.KeyValue
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ns := testserver.StartNATS(t)
	nc, err := nats.Connect(ns.URL, nats.MaxReconnects(-1), nats.ReconnectWait(20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: bucket, History: 5})
	if err != nil {
		t.Fatal(err)
	}
	return &env{ns: ns, js: js, kv: kv}
}

func (e *env) put(t *testing.T, key, value string) {
	t.Helper()
	if _, err := e.kv.PutString(context.Background(), key, value); err != nil {
		t.Fatal(err)
	}
}

// run runs a Follower for h until the test ends, and checks that Run
// returns ctx's error.
func (e *env) run(t *testing.T, h follow.Handler, retry time.Duration) *follow.Follower {
	t.Helper()
	f := follow.New(h, retry)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx, e.js) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Run returned %v, want context.Canceled", err)
		}
	})
	return f
}

// A watch reads the whole bucket, says when it is in, then hands over each
// change in revision order.
func TestReadThenChanges(t *testing.T) {
	e := newEnv(t)
	e.put(t, "a", "1")
	e.put(t, "b", "2")
	e.put(t, "a", "3") // the whole read holds a key's last value
	r := newRecorder()
	e.run(t, r, time.Hour)
	r.expect(t, "read b=2@2", "read a=3@3", "loaded 3")
	e.put(t, "c", "4")
	if err := e.kv.Delete(context.Background(), "b"); err != nil {
		t.Fatal(err)
	}
	r.expect(t, "change c=4@4", "change delete b@5")
}

// An empty bucket's whole read is in at once, at revision 0.
func TestEmptyBucket(t *testing.T) {
	e := newEnv(t)
	r := newRecorder()
	e.run(t, r, time.Hour)
	r.expect(t, "loaded 0")
	e.put(t, "a", "1")
	r.expect(t, "change a=1@1")
}

// The last change of a burst says no more is waiting, so that a handler
// can do its work once per burst.
func TestBurstEndsWithoutMore(t *testing.T) {
	e := newEnv(t)
	r := newRecorder()
	e.run(t, r, time.Hour)
	r.expect(t, "loaded 0")
	const n = 200
	var futures []jetstream.PubAckFuture
	for i := range n {
		f, err := e.js.PublishAsync("$KV."+bucket+".k"+fmt.Sprint(i), []byte("v"))
		if err != nil {
			t.Fatal(err)
		}
		futures = append(futures, f)
	}
	for _, f := range futures {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatal(err)
		}
	}
	for i := range n {
		r.expect(t, fmt.Sprintf("change k%d=v@%d", i, i+1))
	}
	if r.more { // written by Run's goroutine before the event was sent
		t.Error("the burst's last change says more are waiting")
	}
}

// Resync ends the watch and reads the whole bucket again at once.
func TestResync(t *testing.T) {
	e := newEnv(t)
	e.put(t, "a", "1")
	r := newRecorder()
	f := e.run(t, r, time.Hour)
	r.expect(t, "read a=1@1", "loaded 1")
	f.Resync()
	r.expect(t, "restart resync", "read a=1@1", "loaded 1")
}

// A failed bind is retried after the retry interval; a failed change ends
// the watch and the next one reads the whole bucket again.
func TestFailuresRestart(t *testing.T) {
	e := newEnv(t)
	e.put(t, "a", "1")
	r := newRecorder()
	r.failBinds = []error{errors.New("no bucket yet")}
	r.failChanges = []error{errors.New("ledger down")}
	e.run(t, r, 10*time.Millisecond)
	r.expect(t, "restart no bucket yet", "read a=1@1", "loaded 1")
	e.put(t, "b", "2")
	r.expect(t, "failed change b=2@2", "restart ledger down", "read a=1@1", "read b=2@2", "loaded 2")
}

// Resync cuts the wait after a failure short.
func TestResyncEndsTheRetryWait(t *testing.T) {
	e := newEnv(t)
	r := newRecorder()
	r.failBinds = []error{errors.New("no bucket yet")}
	f := e.run(t, r, time.Hour)
	r.expect(t, "restart no bucket yet")
	f.Resync()
	r.expect(t, "loaded 0")
}

// After NATS restarts, the watch notices the reconnection and reads the
// whole bucket again, changes made meanwhile included.
func TestReconnect(t *testing.T) {
	e := newEnv(t)
	e.put(t, "a", "1")
	r := newRecorder()
	e.run(t, r, 10*time.Millisecond)
	r.expect(t, "read a=1@1", "loaded 1")
	e.ns.Restart(t)
	// Until the follower reads again it may fail (the server not back),
	// any number of times: skip those restarts.
	deadline := time.After(10 * time.Second)
	for {
		select {
		case ev := <-r.events:
			if ev == "restart resync" || strings.HasPrefix(ev, "restart ") {
				continue
			}
			if ev != "read a=1@1" {
				t.Fatalf("after the restart: got %q, want the whole read again", ev)
			}
			r.expect(t, "loaded 1")
			e.put(t, "b", "2")
			r.expect(t, "change b=2@2")
			return
		case <-deadline:
			t.Fatal("no whole read within 10s of the restart")
		}
	}
}
