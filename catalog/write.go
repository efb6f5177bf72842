package catalog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/quotaplatform/quota/limit"
)

// PutPlan creates or replaces plan name, recording actor as its writer, and
// returns the new catalogue version. Every field of p but its Name is
// stored; p must pass limit.Plan.Validate (the error wraps
// ErrInvalidValue and names the field).
func (c *Catalog) PutPlan(ctx context.Context, actor, name string, p limit.Plan) (uint64, error) {
	return c.put(ctx, planEntry(name, p, actor))
}

// Assign assigns key to plan, which must exist (the built-in default
// counts), recording actor as the writer.
func (c *Catalog) Assign(ctx context.Context, actor, key, plan string) (uint64, error) {
	if err := CheckName("plan", plan); err != nil {
		return 0, err
	}
	if _, ok := c.PlanEntry(plan); !ok {
		return 0, fmt.Errorf("%w: plan %q does not exist", limit.ErrUnknownPlan, plan)
	}
	return c.put(ctx, Entry{Kind: KindKey, Name: key, Plan: plan, Actor: actor})
}

// PutCost sets endpoint's weight, recording actor as the writer.
func (c *Catalog) PutCost(ctx context.Context, actor, endpoint string, cost int64) (uint64, error) {
	return c.put(ctx, Entry{Kind: KindCost, Name: endpoint, Cost: cost, Actor: actor})
}

// PutRLS creates or replaces the rate limit service rules of domain
// (KindRLS): yaml is the domain's envoyproxy/ratelimit configuration,
// stored as written, at most MaxRLSBytes. The catalogue does not parse it
// (it does not import the rate limit service): rls.PutDomain parses it
// first and refuses a bad one naming its line and field, and the daemons'
// catalogue watch (rls.WatchCatalog) skips an entry that does not parse,
// keeping that domain's last good rules. Every process gets the rules by
// push, like plans.
func (c *Catalog) PutRLS(ctx context.Context, actor, domain, yaml string) (uint64, error) {
	return c.put(ctx, Entry{Kind: KindRLS, Name: domain, YAML: yaml, Actor: actor})
}

// Delete removes plan, key assignment, endpoint weight or rate limit
// service domain name (kind says which), recording actor as the deleter, and returns the new catalogue
// version. The deletion is stored as a tombstone, so History says who
// deleted what and when. It wraps ErrNotFound when there is no such entry
// (the built-in default plan cannot be deleted), and ErrInUse for a plan
// that keys are still assigned to: reassign them first.
//
// What follows: a key whose assignment is deleted uses the "default" plan;
// an endpoint whose weight is deleted costs the daemon's default cost, or
// is refused when there is none; when the "default" plan is deleted,
// unassigned keys use the built-in default, or are refused when there is
// none; a rate limit service domain that is deleted is unknown to the
// service (gRPC NotFound).
func (c *Catalog) Delete(ctx context.Context, actor string, kind Kind, name string) (uint64, error) {
	field := kind.field()
	if field == "" {
		return 0, fmt.Errorf("%w: kind %q", ErrInvalidValue, kind)
	}
	if err := CheckName(field, name); err != nil {
		return 0, err
	}
	c.mu.RLock()
	_, ok := c.st.table(kind)[name]
	var users []string
	n := 0
	if ok && kind == KindPlan {
		for key, a := range c.st.keys {
			if a.Plan == name {
				if n++; len(users) < 3 {
					users = append(users, key)
				}
			}
		}
	}
	c.mu.RUnlock()
	if !ok {
		return 0, fmt.Errorf("%w: %s %q does not exist", ErrNotFound, field, name)
	}
	if n > 0 {
		slices.Sort(users)
		return 0, fmt.Errorf("%w: plan %q is assigned to %d keys (%s): reassign them first", ErrInUse, name, n, strings.Join(users, ", "))
	}
	return c.put(ctx, Entry{Kind: kind, Name: name, Actor: actor, Deleted: true})
}

// put writes e and waits until this process's watch has applied it, so
// that a read after the write sees it. It fails with ErrUnavailable while
// the bucket cannot be reached, and with ErrReadOnly on a ReadOnly Catalog.
func (c *Catalog) put(ctx context.Context, e Entry) (uint64, error) {
	if c.cfg.ReadOnly {
		return 0, fmt.Errorf("%w: %s %q not written", ErrReadOnly, e.Kind, e.Name)
	}
	if e.Actor == "" {
		e.Actor = "unknown"
	}
	e.At = time.Now().UTC()
	e.Revision = 0
	if err := e.Validate(); err != nil {
		return 0, err
	}
	kvp, err := c.bucket()
	if err != nil {
		return 0, err
	}
	value, err := json.Marshal(e)
	if err != nil {
		return 0, fmt.Errorf("catalog: encode %s %q: %w", e.Kind, e.Name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.WriteTimeout)
	defer cancel()
	if c.cfg.Tracer != nil {
		var span trace.Span
		ctx, span = c.cfg.Tracer.Start(ctx, "quota.catalog.write", trace.WithAttributes(
			attribute.String("quota.kind", string(e.Kind)), attribute.Bool("quota.deleted", e.Deleted)))
		defer span.End()
	}
	rev, err := (*kvp).Put(ctx, kvKey(e.Kind, e.Name), value)
	if err != nil {
		err = fmt.Errorf("%w: put %s %q: %w", ErrUnavailable, e.Kind, e.Name, err)
		trace.SpanFromContext(ctx).RecordError(err)
		trace.SpanFromContext(ctx).SetStatus(codes.Error, "catalogue write failed")
		return 0, err
	}
	trace.SpanFromContext(ctx).SetAttributes(attribute.Int64("quota.revision", int64(rev)))
	c.log.Info("catalogue write", "kind", e.Kind, "name", logName(e.Kind, e.Name), "actor", e.Actor, "deleted", e.Deleted, "revision", rev)
	if e.Kind == KindKey {
		c.log.Debug("catalogue write", "kind", e.Kind, "name", e.Name, "revision", rev)
	}
	if err := c.WaitVersion(ctx, rev); err != nil {
		// Written, but not yet seen by this process's watch: the write
		// stands, and the watch will apply it.
		c.log.Warn("catalogue write not yet applied locally", "revision", rev, "err", err)
	}
	return rev, nil
}

// bucket returns the bound bucket, failing fast while NATS is unreachable
// rather than waiting out a timeout.
func (c *Catalog) bucket() (*jetstream.KeyValue, error) {
	kvp := c.kv.Load()
	if kvp == nil {
		return nil, fmt.Errorf("%w: not connected to the bucket %q yet", ErrUnavailable, c.cfg.Bucket)
	}
	if nc := c.js.Conn(); nc != nil && !nc.IsConnected() {
		return nil, fmt.Errorf("%w: not connected to NATS (%s)", ErrUnavailable, nc.Status())
	}
	return kvp, nil
}

// WaitVersion waits until the catalogue version is at least v or ctx ends.
func (c *Catalog) WaitVersion(ctx context.Context, v uint64) error {
	for {
		c.mu.RLock()
		cur, ch := c.version, c.applied
		c.mu.RUnlock()
		if cur >= v {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("catalog: version %d not reached (at %d): %w", v, cur, ctx.Err())
		}
	}
}

// WaitSynced waits until the watch has read the bucket once, or ctx ends.
func (c *Catalog) WaitSynced(ctx context.Context) error {
	for {
		c.mu.RLock()
		synced, ch := c.synced, c.applied
		c.mu.RUnlock()
		if synced {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("catalog: not synced with the bucket: %w", ctx.Err())
		}
	}
}

// History returns the stored revisions of one entry, oldest first: each
// says what was written, by whom and when, or that it was deleted. It
// wraps ErrNotFound when the bucket has no such entry.
func (c *Catalog) History(ctx context.Context, kind Kind, name string) ([]Entry, error) {
	kvp, err := c.bucket()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.WriteTimeout)
	defer cancel()
	hist, err := (*kvp).History(ctx, kvKey(kind, name))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("%w: no history for %s %q", ErrNotFound, kind, name)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: history of %s %q: %w", ErrUnavailable, kind, name, err)
	}
	out := make([]Entry, 0, len(hist))
	for _, h := range hist {
		if h.Operation() != jetstream.KeyValuePut {
			out = append(out, Entry{Kind: kind, Name: name, Revision: h.Revision(), At: h.Created().UTC(), Deleted: true})
			continue
		}
		e, err := decodeEntry(h.Key(), h.Value(), h.Revision())
		if err != nil {
			c.logBadEntry("skipping undecodable history entry", h.Key(), h.Revision(), err)
			continue
		}
		out = append(out, e)
	}
	return out, nil
}
