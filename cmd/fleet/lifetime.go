package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// lifetime is what the harness's constructors take a testing.TB for, in a
// program: cleanups registered with Cleanup run, last in first out, when
// close is called; TempDir makes directories under one root that close
// removes last; Fatal ends the calling goroutine, as testing's does, after
// marking the lifetime failed. The harness is the one way this project
// starts a fleet, and it takes a testing.TB; lifetime lets a program hold
// one for as long as it runs, so that no second copy of the harness exists.
//
// testing.TB has an unexported method so that new methods can be added to
// it; the embedded nil TB provides only that one. Every exported method is
// defined here, so a call never reaches the nil value (a method added to
// testing.TB in a later Go release would, and panic: lifetime's test calls
// every method the harness calls).
//
// Its methods are safe for concurrent use. Fatal and FailNow, like
// testing's, must be called from a goroutine that may end: run the code
// that can fail in its own goroutine (see runGuarded).
type lifetime struct {
	testing.TB

	out  io.Writer // logs and failures
	root string    // parent of every TempDir

	ctx    context.Context
	cancel context.CancelFunc

	mu       sync.Mutex
	cleanups []func() // guarded by mu
	failed   bool     // guarded by mu
	dirs     int      // TempDirs made; guarded by mu
}

var _ testing.TB = (*lifetime)(nil)

// newLifetime makes a lifetime whose temporary directories go under a new
// directory in the system's temporary directory, and whose logs go to out.
func newLifetime(out io.Writer) (*lifetime, error) {
	root, err := os.MkdirTemp("", "quota-fleet-")
	if err != nil {
		return nil, fmt.Errorf("fleet: temporary directory: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &lifetime{out: out, root: root, ctx: ctx, cancel: cancel}, nil
}

// Root is the directory holding every TempDir: the processes' logs.
func (l *lifetime) Root() string { return l.root }

// close cancels Context, runs the cleanups last in first out (a panicking
// one is reported and the others still run), and removes Root.
func (l *lifetime) close() {
	l.cancel()
	for {
		l.mu.Lock()
		n := len(l.cleanups)
		if n == 0 {
			l.mu.Unlock()
			break
		}
		f := l.cleanups[n-1]
		l.cleanups = l.cleanups[:n-1]
		l.mu.Unlock()
		l.runCleanup(f)
	}
	if err := os.RemoveAll(l.root); err != nil {
		fmt.Fprintf(l.out, "fleet: remove %s: %v\n", l.root, err)
	}
}

func (l *lifetime) runCleanup(f func()) {
	defer func() {
		if r := recover(); r != nil {
			l.markFailed()
			fmt.Fprintf(l.out, "fleet: a cleanup panicked: %v\n", r)
		}
	}()
	f()
}

// runGuarded runs f in its own goroutine and waits for it; it reports
// false when f called Fatal (or FailNow, Skip).
func (l *lifetime) runGuarded(f func()) bool {
	done := make(chan struct{})
	ok := false
	go func() {
		defer close(done)
		f()
		ok = true
	}()
	<-done
	return ok && !l.Failed()
}

func (l *lifetime) markFailed() {
	l.mu.Lock()
	l.failed = true
	l.mu.Unlock()
}

// Cleanup registers f to run at close.
func (l *lifetime) Cleanup(f func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cleanups = append(l.cleanups, f)
}

// TempDir makes a new directory under Root.
func (l *lifetime) TempDir() string {
	l.mu.Lock()
	l.dirs++
	n := l.dirs
	l.mu.Unlock()
	dir := filepath.Join(l.root, fmt.Sprintf("%03d", n))
	if err := os.Mkdir(dir, 0o755); err != nil {
		l.Fatalf("fleet: TempDir: %v", err)
	}
	return dir
}

// ArtifactDir is a TempDir: a fleet keeps nothing after it stops.
func (l *lifetime) ArtifactDir() string { return l.TempDir() }

// Context is cancelled when close begins.
func (l *lifetime) Context() context.Context { return l.ctx }

// Output is where logs go.
func (l *lifetime) Output() io.Writer { return l.out }

func (l *lifetime) Log(args ...any) { fmt.Fprintln(l.out, args...) }

func (l *lifetime) Logf(format string, args ...any) {
	fmt.Fprintf(l.out, format+"\n", args...)
}

func (l *lifetime) Error(args ...any) {
	l.markFailed()
	l.Log(args...)
}

func (l *lifetime) Errorf(format string, args ...any) {
	l.markFailed()
	l.Logf(format, args...)
}

func (l *lifetime) Fail() { l.markFailed() }

// FailNow marks the lifetime failed and ends the calling goroutine.
func (l *lifetime) FailNow() {
	l.markFailed()
	runtime.Goexit()
}

func (l *lifetime) Failed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

func (l *lifetime) Fatal(args ...any) {
	l.Log(args...)
	l.FailNow()
}

func (l *lifetime) Fatalf(format string, args ...any) {
	l.Logf(format, args...)
	l.FailNow()
}

// Skip, SkipNow and Skipf fail: a fleet that cannot start everything does
// not start.
func (l *lifetime) Skip(args ...any) { l.Fatal(args...) }

func (l *lifetime) SkipNow() { l.FailNow() }

func (l *lifetime) Skipf(format string, args ...any) { l.Fatalf(format, args...) }

func (l *lifetime) Skipped() bool { return false }

// Helper does nothing: logs carry no file and line.
func (l *lifetime) Helper() {}

func (l *lifetime) Name() string { return "fleet" }

func (l *lifetime) Attr(key, value string) { l.Logf("%s: %s", key, value) }

// Setenv sets an environment variable until close.
func (l *lifetime) Setenv(key, value string) {
	prev, had := os.LookupEnv(key)
	if err := os.Setenv(key, value); err != nil {
		l.Fatalf("fleet: Setenv %s: %v", key, err)
	}
	l.Cleanup(func() {
		if had {
			_ = os.Setenv(key, prev)
		} else {
			_ = os.Unsetenv(key)
		}
	})
}

// Chdir changes the working directory until close.
func (l *lifetime) Chdir(dir string) {
	prev, err := os.Getwd()
	if err != nil {
		l.Fatalf("fleet: Chdir: %v", err)
	}
	if err := os.Chdir(dir); err != nil {
		l.Fatalf("fleet: Chdir %s: %v", dir, err)
	}
	l.Cleanup(func() { _ = os.Chdir(prev) })
}
