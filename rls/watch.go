package rls

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/quotaplatform/quota/clock"
)

// WatchConfig configures a Watcher.
type WatchConfig struct {
	// Path is the configuration: a file or a directory (see Load).
	// Required.
	Path string
	// Interval is how often the files' names, sizes and modification
	// times are compared with the last load's. Default 1s.
	Interval time.Duration
	// Clock ticks the polls. Default clock.System().
	Clock clock.Clock
	// OnLoad is called with each configuration loaded after a change, on
	// the Watcher's goroutine. Required.
	OnLoad func(*Config)
	// OnError is called with each failed load after a change (the last
	// good configuration stays in force), on the Watcher's goroutine; it is
	// not called again until the files change again. Default: nothing.
	OnError func(error)
}

// Watcher reloads a configuration when its files change, by polling their
// metadata (no file system notifications: they miss changes on some
// volumes, and a ConfigMap's symlink swap is a directory change).
type Watcher struct {
	cfg  WatchConfig
	last string // fingerprint of the files last loaded or tried
}

// NewWatcher loads the configuration once, returning it, and a Watcher
// whose Run reloads it on change. A configuration that does not load is
// an error.
func NewWatcher(cfg WatchConfig) (*Watcher, *Config, error) {
	if cfg.Path == "" {
		return nil, nil, errors.New("rls: WatchConfig.Path must not be empty")
	}
	if cfg.OnLoad == nil {
		return nil, nil, errors.New("rls: WatchConfig.OnLoad must not be nil")
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.Interval < 0 {
		return nil, nil, fmt.Errorf("rls: WatchConfig.Interval must be positive, got %v", cfg.Interval)
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.System()
	}
	if cfg.OnError == nil {
		cfg.OnError = func(error) {}
	}
	w := &Watcher{cfg: cfg}
	w.last = fingerprint(cfg.Path)
	c, err := Load(cfg.Path)
	if err != nil {
		return nil, nil, err
	}
	return w, c, nil
}

// Run polls until ctx is done.
func (w *Watcher) Run(ctx context.Context) {
	tick := w.cfg.Clock.NewTicker(w.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C():
			w.poll()
		case <-ctx.Done():
			return
		}
	}
}

// poll reloads when the fingerprint changed.
func (w *Watcher) poll() {
	fp := fingerprint(w.cfg.Path)
	if fp == w.last {
		return
	}
	w.last = fp
	c, err := Load(w.cfg.Path)
	if err != nil {
		w.cfg.OnError(err)
		return
	}
	w.cfg.OnLoad(c)
}

// fingerprint names the files of path with their sizes and modification
// times; an error is part of it, so that its end is a change.
func fingerprint(path string) string {
	files, err := configFiles(path)
	if err != nil {
		return "error: " + err.Error()
	}
	slices.Sort(files)
	var b []byte
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			b = fmt.Appendf(b, "%s error %v\n", f, err)
			continue
		}
		b = fmt.Appendf(b, "%s %d %d\n", f, st.Size(), st.ModTime().UnixNano())
	}
	return string(b)
}
