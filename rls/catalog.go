package rls

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/quotaplatform/quota/catalog"
)

// PutDomain writes yaml, envoyproxy/ratelimit's configuration of domain,
// to the catalogue (catalog.Catalog.PutRLS), for every process to get by
// push, once it parses (ParseDomain: its domain field must be domain). A
// configuration that does not parse is an error wrapping ErrInvalidConfig
// (a *ConfigError naming the line and field), and nothing is written. A
// bad domain name wraps catalog.ErrInvalidName, text over
// catalog.MaxRLSBytes catalog.ErrInvalidValue; the catalogue's own errors
// (catalog.ErrUnavailable, catalog.ErrReadOnly) are returned as they are.
func PutDomain(ctx context.Context, cat *catalog.Catalog, actor, domain string, yaml []byte) (uint64, error) {
	if err := catalog.CheckName("domain", domain); err != nil {
		return 0, err
	}
	if len(yaml) > catalog.MaxRLSBytes {
		return 0, fmt.Errorf("%w: yaml of domain %q is %d bytes, at most %d allowed", catalog.ErrInvalidValue, domain, len(yaml), catalog.MaxRLSBytes)
	}
	if _, err := ParseDomain(domain, yaml); err != nil {
		return 0, err
	}
	return cat.PutRLS(ctx, actor, domain, string(yaml))
}

// CatalogSource is the catalogue WatchCatalog reads rules from;
// *catalog.Catalog is one.
type CatalogSource interface {
	// RLSEntries lists every domain's entry (catalog.KindRLS).
	RLSEntries() []catalog.Entry
	// OnChange registers f to be called after every change applied.
	OnChange(f func())
}

var _ CatalogSource = (*catalog.Catalog)(nil)

// CatalogWatchConfig configures WatchCatalog.
type CatalogWatchConfig struct {
	// Catalog holds the rules, one entry per domain. Required.
	Catalog CatalogSource
	// Rules is where the rules are put in force. Required.
	Rules *Rules
	// OnLoad is called with each Config put in force, after Rules.Set:
	// the caller then invalidates the limiter's cached plans. Default:
	// nothing.
	OnLoad func(*Config)
	// OnError is called once for each revision of a domain's entry that
	// does not parse (that domain's last good rules stay in force).
	// Default: nothing.
	OnError func(error)
}

// WatchCatalog puts the rules stored in the catalogue in force in
// cfg.Rules: now, from the catalogue's current copy (read from the bucket,
// the last known good cache file, or nothing yet: then every domain is
// unknown until the catalogue has read the bucket), and again after every
// change the catalogue applies, on its watch goroutine. A domain whose
// entry changed and parses gets its new rules; one whose entry does not
// parse (written around PutDomain, or by a newer version) keeps its last
// good rules, or stays unknown if it never had any; a deleted domain is
// unknown. A Config is put in force only when a domain's rules changed.
// WatchCatalog starts no goroutine: it ends with the catalogue's watch.
// Call it once per Rules, before the catalogue starts.
func WatchCatalog(cfg CatalogWatchConfig) error {
	if cfg.Catalog == nil {
		return errors.New("rls: CatalogWatchConfig.Catalog must not be nil")
	}
	if cfg.Rules == nil {
		return errors.New("rls: CatalogWatchConfig.Rules must not be nil")
	}
	if cfg.OnLoad == nil {
		cfg.OnLoad = func(*Config) {}
	}
	if cfg.OnError == nil {
		cfg.OnError = func(error) {}
	}
	s := &catalogSync{cfg: cfg, good: map[string]goodDomain{}, tried: map[string]uint64{}}
	cfg.Catalog.OnChange(s.sync)
	s.sync()
	return nil
}

// catalogSync is WatchCatalog's state: the last good rules of each domain
// and the revision of each domain's entry last parsed.
type catalogSync struct {
	cfg CatalogWatchConfig

	mu     sync.Mutex            // held by sync, which the catalogue's watch and WatchCatalog call
	good   map[string]goodDomain // guarded by mu; domain → its last good rules
	tried  map[string]uint64     // guarded by mu; domain → revision last parsed
	loaded bool                  // guarded by mu; a Config was put in force
}

type goodDomain struct {
	yaml string
	cfg  *Config
}

// sync reads the catalogue's entries and puts the rules in force when a
// domain's changed.
func (s *catalogSync) sync() {
	s.mu.Lock()
	defer s.mu.Unlock()
	entries := s.cfg.Catalog.RLSEntries()
	changed := !s.loaded
	present := make(map[string]bool, len(entries))
	for _, e := range entries {
		present[e.Name] = true
		if g, ok := s.good[e.Name]; ok && g.yaml == e.YAML {
			s.tried[e.Name] = e.Revision // unchanged text: a re-read of the bucket
			continue
		}
		if rev, ok := s.tried[e.Name]; ok && rev == e.Revision {
			continue // refused already
		}
		s.tried[e.Name] = e.Revision
		c, err := ParseDomain(e.Name, []byte(e.YAML))
		if err != nil {
			s.cfg.OnError(fmt.Errorf("%w (catalogue revision %d, written by %s)", err, e.Revision, e.Actor))
			continue
		}
		s.good[e.Name] = goodDomain{yaml: e.YAML, cfg: c}
		changed = true
	}
	for d := range s.good {
		if !present[d] {
			delete(s.good, d)
			changed = true
		}
	}
	for d := range s.tried {
		if !present[d] {
			delete(s.tried, d)
		}
	}
	if !changed {
		return
	}
	s.loaded = true
	c := mergeDomains(s.good)
	s.cfg.Rules.Set(c)
	s.cfg.OnLoad(c)
}

// mergeDomains is one Config of every domain's rules. Each domain's
// Config was parsed alone; their rule ids hash the domain, so they do not
// meet.
func mergeDomains(good map[string]goodDomain) *Config {
	c := &Config{domains: map[string]*node{}, rules: map[string]*Rule{}}
	for d, g := range good {
		c.Files = append(c.Files, CatalogFile(d))
		for name, root := range g.cfg.domains {
			c.domains[name] = root
		}
		for id, r := range g.cfg.rules {
			c.rules[id] = r
		}
	}
	slices.Sort(c.Files)
	return c
}
