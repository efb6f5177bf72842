package main

import (
	"fmt"
	"io"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/quotaplatform/quota/test/multiregion"
)

// The demo plan: one global limit that every region shares.
const (
	demoPlan  = "demo"
	demoRate  = 5  // cost units per second, for all regions together
	demoBurst = 30 // capacity, cost units
	// demoKey is checked once in each region; burstKey takes 20 checks in
	// each region back to back, which the regions together admit about
	// demoBurst of.
	demoKey        = "demo-a"
	burstKey       = "demo-b"
	burstPerRegion = 20
)

// readyLine ends the guide: everything is up until Ctrl-C.
const readyLine = "fleet: ready; Ctrl-C stops everything."

// fleet is a started cluster with the demo plan in its catalogue.
type fleet struct {
	c    *multiregion.Cluster
	logs string
	// usageFrom and usageTo bound the usage query the guide prints: the
	// hour the fleet started in and the day after it.
	usageFrom, usageTo time.Time
	shares             map[string]float64 // demoKey's, by region, once converged
}

// startFleet starts the cluster, writes the demo plan and keys, and waits
// until every limiter runs them and the regions' shares sum to one. It
// calls life.Fatal when something does not come up.
func startFleet(life *lifetime, spec multiregion.Spec) *fleet {
	c := multiregion.Start(life, spec)
	c.SetPlan(demoPlan, demoRate, demoBurst)
	c.AssignKey(demoKey, demoPlan)
	c.AssignKey(burstKey, demoPlan)
	c.WaitPlan(time.Minute, demoRate, demoBurst, demoKey, burstKey)
	c.WaitConverged(time.Minute, demoKey, burstKey)
	shares, err := c.Shares(demoKey)
	if err != nil {
		life.Fatalf("fleet: shares of %s: %v", demoKey, err)
	}
	from := time.Now().UTC().Truncate(time.Hour)
	return &fleet{c: c, logs: life.Root(), usageFrom: from, usageTo: from.Add(24 * time.Hour), shares: shares}
}

// usageURL is the billing API's query of key's usage by hour.
func (f *fleet) usageURL(key string) string {
	q := url.Values{
		"key":         {key},
		"from":        {f.usageFrom.Format(time.RFC3339)},
		"to":          {f.usageTo.Format(time.RFC3339)},
		"granularity": {"hour"},
	}
	return f.c.ReconcilerURL() + "/v1/usage?" + q.Encode()
}

// printGuide prints every URL and the lines to try, then readyLine.
func (f *fleet) printGuide(w io.Writer, took time.Duration) {
	c, spec := f.c, f.c.Spec()
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("quota fleet: %d regions on this machine, up in %.1f s", len(spec.Regions), took.Seconds())
	p("")
	var firsts []string
	for _, r := range c.Regions() {
		p("region %s    redis %s    nats %s", r, c.Region(r).Redis.Addr, c.NATSURL(r))
		for _, n := range c.Region(r).Nodes() {
			role := ""
			if n.ControlPlane() {
				role = "  (control plane: catalogue writes)"
			}
			p("  limiter %-5s %s%s", n.Name(), n.URL(), role)
		}
		firsts = append(firsts, c.Node(r, 0).URL())
	}
	p("reconciler      %s    billing API %s/v1/usage", c.ReconcilerURL(), c.ReconcilerURL())
	p("metrics         %s/metrics (every limiter and the reconciler)", firsts[0])
	p("postgres        %s", redactPassword(c.PostgresURL()))
	p("logs            %s", f.logs)
	p("admin token     %s  (PUT /v1/limits, /v1/keys on the control plane)", spec.AdminToken)
	p("billing token   %s  (GET /v1/usage)", spec.BillingToken)
	p("")
	p("plan %q: %d per second, burst %d, one limit across every region, for keys %s and %s;",
		demoPlan, demoRate, demoBurst, demoKey, burstKey)
	p("each region holds a share of it, rebalanced from demand (now %s)", formatShares(f.shares))
	p("")
	p("# one check in each region")
	for _, u := range firsts {
		p("curl -s -X POST %s/v1/allow -d '{\"key\":%q,\"cost\":1}'; echo", u, demoKey)
	}
	p("# %d checks of %s in each region, back to back: together the regions admit about %d, not %d",
		burstPerRegion, burstKey, demoBurst, burstPerRegion*len(firsts))
	p("for u in %s; do for i in $(seq %d); do curl -s -X POST $u/v1/allow -d '{\"key\":%q,\"cost\":1}'; echo; done; done | grep -c '\"allowed\":true'",
		strings.Join(firsts, " "), burstPerRegion, burstKey)
	p("# %s's allowed and net, as billing reads them from the ledger (reports land within about 2 s)", demoKey)
	p("curl -s -H 'Authorization: Bearer %s' '%s'; echo", spec.BillingToken, f.usageURL(demoKey))
	p("")
	p("%s", readyLine)
}

// formatShares renders shares as "eu 0.50, us 0.30, ap 0.20", by name.
func formatShares(shares map[string]float64) string {
	names := make([]string, 0, len(shares))
	for r := range shares {
		names = append(names, r)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, r := range names {
		parts = append(parts, fmt.Sprintf("%s %.2f", r, shares[r]))
	}
	return strings.Join(parts, ", ")
}

// redactPassword hides a password in a database URL; the fleet's have
// none (trust authentication on loopback), a machine's server may.
func redactPassword(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
