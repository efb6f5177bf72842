package rls_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quotaplatform/quota/rls"
)

func limitConfig(n int) string {
	return fmt.Sprintf("domain: edge\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: minute\n      requests_per_unit: %d\n", n)
}

// watched is a config file under a Watcher that puts every load in force
// on a harness's limiter, as the daemon does.
type watched struct {
	path   string
	h      *harness
	loads  chan *rls.Config
	errors chan error
}

func startWatched(t *testing.T, text string) *watched {
	t.Helper()
	w := &watched{path: filepath.Join(t.TempDir(), "edge.yaml"), loads: make(chan *rls.Config, 16), errors: make(chan error, 16)}
	w.write(t, text)
	var h *harness
	watcher, cfg, err := rls.NewWatcher(rls.WatchConfig{
		Path:     w.path,
		Interval: 20 * time.Millisecond,
		OnLoad: func(c *rls.Config) {
			h.rules.Set(c)
			h.lim.InvalidateAll()
			w.loads <- c
		},
		OnError: func(err error) { w.errors <- err },
	})
	if err != nil {
		t.Fatal(err)
	}
	h = startHarness(t, cfg, harnessOptions{})
	w.h = h
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); watcher.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

// write replaces the file as an editor or a ConfigMap update does: a new
// file renamed over the old one.
func (w *watched) write(t *testing.T, text string) {
	t.Helper()
	tmp := w.path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, w.path); err != nil {
		t.Fatal(err)
	}
}

// limitOf asks for user=u and returns its current limit.
func (w *watched) limitOf(t *testing.T, u string) (uint32, uint32) {
	t.Helper()
	resp, err := w.h.client.ShouldRateLimit(context.Background(), req(0, desc("user", u)))
	if err != nil {
		t.Fatal(err)
	}
	return resp.Statuses[0].CurrentLimit.GetRequestsPerUnit(), resp.Statuses[0].LimitRemaining
}

// A changed file is in force within a second, while requests keep being
// answered: none fails during the reload.
func TestReloadUnderLoad(t *testing.T) {
	w := startWatched(t, limitConfig(5))
	if l, _ := w.limitOf(t, "first"); l != 5 {
		t.Fatalf("limit %d, want 5", l)
	}
	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		sent    atomic.Int64
		failed  atomic.Int64
		lastErr atomic.Value
	)
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				_, err := w.h.client.ShouldRateLimit(context.Background(), req(0, desc("user", fmt.Sprintf("load-%d-%d", g, i%50))))
				sent.Add(1)
				if err != nil {
					failed.Add(1)
					lastErr.Store(err)
				}
			}
		}()
	}
	for deadline := time.Now().Add(5 * time.Second); sent.Load() < 200; { // load is flowing
		if time.Now().After(deadline) {
			t.Fatalf("only %d requests sent in 5s", sent.Load())
		}
		time.Sleep(time.Millisecond)
	}
	written := time.Now()
	w.write(t, limitConfig(50))
	select {
	case <-w.loads:
	case err := <-w.errors:
		t.Fatalf("reload failed: %v", err)
	case <-time.After(time.Second):
		t.Fatal("the changed file was not loaded within a second")
	}
	limit, remaining := w.limitOf(t, "fresh")
	took := time.Since(written)
	for after := sent.Load(); sent.Load() < after+200; { // and keeps flowing after it
		time.Sleep(time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	if limit != 50 || remaining != 49 {
		t.Errorf("after the reload: limit %d, remaining %d; want 50, 49", limit, remaining)
	}
	if took > time.Second {
		t.Errorf("the new limit applied after %v, want within a second", took)
	}
	if failed.Load() != 0 {
		t.Errorf("%d of %d requests failed during the reload, last: %v", failed.Load(), sent.Load(), lastErr.Load())
	}
	t.Logf("%d requests during the reload; new limit in force after %v", sent.Load(), took)
	// Keys used before the reload re-lease under the new limit too.
	if l, _ := w.limitOf(t, "load-0-0"); l != 50 {
		t.Errorf("an old key's limit is %d, want 50", l)
	}
}

// An invalid file is refused with its file, line and field; the last good
// configuration stays in force until a valid one replaces it.
func TestReloadInvalidKeepsLastGood(t *testing.T) {
	w := startWatched(t, limitConfig(5))
	gen := w.h.rules.Generation()
	w.write(t, strings.Replace(limitConfig(7), "minute", "fortnight", 1))
	select {
	case err := <-w.errors:
		want := w.path + `:5: descriptors[0].rate_limit.unit: must be second, minute, hour or day, got "fortnight"`
		if err.Error() != want || !errors.Is(err, rls.ErrInvalidConfig) {
			t.Errorf("error %q, want %q", err, want)
		}
	case <-w.loads:
		t.Fatal("an invalid file was loaded")
	case <-time.After(5 * time.Second):
		t.Fatal("the invalid file was not noticed")
	}
	if l, _ := w.limitOf(t, "u"); l != 5 || w.h.rules.Generation() != gen {
		t.Errorf("after an invalid file: limit %d (want 5), generation %d (want %d)", l, w.h.rules.Generation(), gen)
	}
	w.write(t, limitConfig(9))
	select {
	case <-w.loads:
	case err := <-w.errors:
		t.Fatalf("valid file refused: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("the fixed file was not loaded")
	}
	if l, _ := w.limitOf(t, "u"); l != 9 {
		t.Errorf("after the fix: limit %d, want 9", l)
	}
}

func TestNewWatcherRefusesInvalid(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.yaml")
	if err := os.WriteFile(path, []byte("domain: x\nfoo: 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, _, err := rls.NewWatcher(rls.WatchConfig{Path: path, OnLoad: func(*rls.Config) {}})
	if err == nil || err.Error() != path+":2: foo: unknown field (want domain or descriptors)" {
		t.Fatalf("got %v", err)
	}
}
