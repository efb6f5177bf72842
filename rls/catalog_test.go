package rls_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/internal/catalogtest"
	"github.com/quotaplatform/quota/internal/testserver"
	"github.com/quotaplatform/quota/rls"
)

// startCatalog starts a catalogue on the bucket of the NATS server at url.
func startCatalog(t *testing.T, url string, readOnly bool) *catalog.Catalog {
	t.Helper()
	return startCatalogCached(t, url, readOnly, "")
}

// startCatalogCached is startCatalog with a last known good cache file.
func startCatalogCached(t *testing.T, url string, readOnly bool, cache string) *catalog.Catalog {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfg := catalog.DefaultConfig()
	cfg.ReadOnly = readOnly
	cfg.CachePath = cache
	cfg.RetryInterval = 20 * time.Millisecond
	return catalogtest.Start(t, js, cfg)
}

func catalogYAML(domain string, perMinute int) string {
	return fmt.Sprintf("domain: %s\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: %d}\n", domain, perMinute)
}

// Rules written to the catalogue on one process (the control plane) are in
// force in another's service within a second; a configuration that does
// not parse is refused with its line and field and never written; one
// written around PutDomain is refused by the watch, the last good rules
// staying; a deleted domain is unknown.
func TestWatchCatalog(t *testing.T) {
	ns := testserver.StartNATS(t)
	writer := startCatalog(t, ns.URL, false)
	reader := startCatalog(t, ns.URL, true)
	h := startHarness(t, nil, harnessOptions{})
	loads := make(chan *rls.Config, 16)
	refusals := make(chan error, 16)
	err := rls.WatchCatalog(rls.CatalogWatchConfig{
		Catalog: reader,
		Rules:   h.rules,
		OnLoad:  func(c *rls.Config) { h.lim.InvalidateAll(); loads <- c },
		OnError: func(err error) { refusals <- err },
	})
	if err != nil {
		t.Fatal(err)
	}
	if c := <-loads; len(c.Domains()) != 0 { // the first load, at once, of an empty catalogue
		t.Fatalf("first load: domains %v", c.Domains())
	}
	ctx := context.Background()
	user := func(v string) *rlsv3.RateLimitRequest {
		return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: []*rlv3.RateLimitDescriptor{desc("user", v)}}
	}

	type refusal struct {
		line  int
		field string
	}
	cases := []struct {
		name  string
		write func() error
		// refused: PutDomain's error; nothing is written.
		refused *refusal
		// watchRefuses: written, and refused by the watch naming this.
		watchRefuses string
		// limit: the requests_per_unit the service answers with after;
		// 0: the domain is unknown (NotFound).
		limit uint32
	}{
		{name: "a new domain is pushed",
			write: func() error {
				_, err := rls.PutDomain(ctx, writer, "admin", "edge", []byte(catalogYAML("edge", 2)))
				return err
			},
			limit: 2},
		{name: "a bad unit is refused before writing",
			write: func() error {
				_, err := rls.PutDomain(ctx, writer, "admin", "edge", []byte(strings.Replace(catalogYAML("edge", 5), "minute", "week", 1)))
				return err
			},
			refused: &refusal{4, "descriptors[0].rate_limit.unit"}, limit: 2},
		{name: "another domain's YAML is refused before writing",
			write: func() error {
				_, err := rls.PutDomain(ctx, writer, "admin", "edge", []byte(catalogYAML("api", 5)))
				return err
			},
			refused: &refusal{1, "domain"}, limit: 2},
		{name: "bad YAML written around PutDomain is refused by the watch",
			write: func() error {
				_, err := writer.PutRLS(ctx, "tool", "edge", "domain: edge\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: -1}\n")
				return err
			},
			watchRefuses: "catalog:rls/edge:4: descriptors[0].rate_limit.requests_per_unit: want a whole number", limit: 2},
		{name: "a changed limit is pushed",
			write: func() error {
				_, err := rls.PutDomain(ctx, writer, "admin", "edge", []byte(catalogYAML("edge", 7)))
				return err
			},
			limit: 7},
		{name: "a deleted domain is unknown",
			write: func() error { _, err := writer.Delete(ctx, "admin", catalog.KindRLS, "edge"); return err },
			limit: 0},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := writer.Version()
			written := time.Now()
			err := tc.write()
			var ce *rls.ConfigError
			switch {
			case tc.refused != nil:
				if !errors.As(err, &ce) || !errors.Is(err, rls.ErrInvalidConfig) || ce.Line != tc.refused.line || ce.Field != tc.refused.field || ce.File != "catalog:rls/edge" {
					t.Fatalf("PutDomain = %v, want a ConfigError at catalog:rls/edge line %d, field %s", err, tc.refused.line, tc.refused.field)
				}
				if writer.Version() != before {
					t.Fatalf("a refused configuration was written: version %d → %d", before, writer.Version())
				}
			case err != nil:
				t.Fatal(err)
			case tc.watchRefuses != "":
				select {
				case err := <-refusals:
					if !strings.Contains(err.Error(), tc.watchRefuses) || !errors.As(err, &ce) {
						t.Fatalf("refusal %v, want one naming %q", err, tc.watchRefuses)
					}
				case c := <-loads:
					t.Fatalf("a bad entry was put in force: %v", c.Files)
				case <-time.After(time.Second):
					t.Fatal("the watch did not refuse the bad entry within a second")
				}
			default:
				select {
				case <-loads:
				case <-time.After(time.Second):
					t.Fatal("the rules were not in force within a second")
				}
				t.Logf("in force on the other process after %v", time.Since(written))
			}
			resp, err := h.client.ShouldRateLimit(ctx, user(fmt.Sprintf("u%d", i)))
			switch {
			case tc.limit == 0 && status.Code(err) != codes.NotFound:
				t.Fatalf("after %s: %v %v, want NotFound", tc.name, resp, err)
			case tc.limit != 0 && (err != nil || resp.Statuses[0].CurrentLimit.GetRequestsPerUnit() != tc.limit):
				t.Fatalf("after %s: %v %v, want limit %d", tc.name, resp, err, tc.limit)
			}
		})
	}
	select {
	case c := <-loads:
		t.Errorf("an unexpected load: %v", c.Files)
	case err := <-refusals:
		t.Errorf("an unexpected refusal: %v", err)
	default:
	}
}

// PutDomain checks the domain name and size before parsing, naming them.
func TestPutDomainChecks(t *testing.T) {
	ns := testserver.StartNATS(t)
	writer := startCatalog(t, ns.URL, false)
	reader := startCatalog(t, ns.URL, true)
	ctx := context.Background()
	for _, c := range []struct {
		name, domain string
		cat          *catalog.Catalog
		yaml         string
		want         error
	}{
		{"domain with a space", "my domain", writer, catalogYAML("my domain", 1), catalog.ErrInvalidName},
		{"empty domain", "", writer, catalogYAML("x", 1), catalog.ErrInvalidName},
		{"too large", "edge", writer, catalogYAML("edge", 1) + strings.Repeat("#", catalog.MaxRLSBytes), catalog.ErrInvalidValue},
		{"empty YAML", "edge", writer, "", rls.ErrInvalidConfig},
		{"not the control plane", "edge", reader, catalogYAML("edge", 1), catalog.ErrReadOnly},
		{"accepted", "edge", writer, catalogYAML("edge", 1), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := rls.PutDomain(ctx, c.cat, "admin", c.domain, []byte(c.yaml))
			if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
				t.Fatalf("PutDomain = %v, want %v", err, c.want)
			}
		})
	}
}

// A process restarted while NATS is away serves the rules of the last
// known good cache file at once: WatchCatalog reads the catalogue's copy
// before its watch has read the bucket.
func TestWatchCatalogFromCache(t *testing.T) {
	ns := testserver.StartNATS(t)
	cache := filepath.Join(t.TempDir(), "catalog.json")
	writer := startCatalog(t, ns.URL, false)
	reader := startCatalogCached(t, ns.URL, true, cache)
	ctx := context.Background()
	v, err := rls.PutDomain(ctx, writer, "admin", "edge", []byte(catalogYAML("edge", 3)))
	if err != nil {
		t.Fatal(err)
	}
	if err := reader.WaitVersion(ctx, v); err != nil {
		t.Fatal(err)
	}
	reader.Stop() // writes the cache file
	ns.Stop()

	cfg := catalog.DefaultConfig()
	cfg.ReadOnly, cfg.CachePath = true, cache
	restarted, err := catalog.New(cfg) // not started: NATS is gone
	if err != nil {
		t.Fatal(err)
	}
	rules := &rls.Rules{}
	if err := rls.WatchCatalog(rls.CatalogWatchConfig{Catalog: restarted, Rules: rules}); err != nil {
		t.Fatal(err)
	}
	entries := []*rlv3.RateLimitDescriptor_Entry{{Key: "user", Value: "a"}}
	if got := rules.Config().Domains(); len(got) != 1 || got[0] != "edge" {
		t.Fatalf("domains from the cache: %v", got)
	}
	if _, ok := rules.Config().Key("edge", entries); !ok {
		t.Fatal("the cached rule does not limit user=a")
	}
}
