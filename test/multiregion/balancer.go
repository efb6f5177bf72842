package multiregion

import (
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// balancer routes the generator's calls as a load balancer in front of a
// region's limiters does. Its health check polls every node's /readyz each
// interval, and calls go round-robin to the nodes whose last answer was 200
// (a connection error or any other status takes a node out until its next
// 200): a node that drains on SIGTERM (503 on /readyz, still serving for
// its --shutdown-delay) stops getting calls within an interval, with no word
// from the harness. When none of a region's nodes is ready, calls go to all
// of them, as the panic mode of Envoy and other balancers does (a
// region-wide failure is more likely the check's than the nodes'), rather
// than failing. Nodes the harness has taken down (CrashProcess,
// RestartProcess) get no calls whatever their /readyz says.
//
// The set of nodes is fixed at creation (a restarted node keeps its
// *Node). poll runs the health check until its context ends; the other
// methods are safe for concurrent use with it.
type balancer struct {
	every  time.Duration
	client *http.Client
	ready  map[*Node]*atomic.Bool // keys fixed at creation; the last check's result
}

// readyTimeout bounds one /readyz call. A node slower than that to answer
// its health check is taken out, as by a balancer.
const readyTimeout = time.Second

func newBalancer(nodes []*Node, every time.Duration) *balancer {
	b := &balancer{
		every: every,
		client: &http.Client{
			Timeout:   readyTimeout,
			Transport: &http.Transport{MaxIdleConnsPerHost: 1, IdleConnTimeout: time.Minute},
		},
		ready: make(map[*Node]*atomic.Bool, len(nodes)),
	}
	for _, n := range nodes {
		b.ready[n] = new(atomic.Bool)
	}
	return b
}

// checkAll runs one health check of every node, concurrently, and returns
// when all have answered.
func (b *balancer) checkAll(ctx context.Context) {
	var wg sync.WaitGroup
	for n, r := range b.ready {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.check(ctx, n, r)
		}()
	}
	wg.Wait()
}

// poll checks every node each interval, one goroutine per node (a node slow
// to answer delays no other's check), until ctx ends.
func (b *balancer) poll(ctx context.Context) {
	var wg sync.WaitGroup
	for n, r := range b.ready {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tick := time.NewTicker(b.every)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
					b.check(ctx, n, r)
				}
			}
		}()
	}
	wg.Wait()
	b.client.CloseIdleConnections()
}

// check records whether n's /readyz answers 200. A check cut short by the
// end of ctx records nothing.
func (b *balancer) check(ctx context.Context, n *Node, r *atomic.Bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, n.URL()+"/readyz", nil)
	if err != nil {
		r.Store(false)
		return
	}
	resp, err := b.client.Do(req)
	if ctx.Err() != nil {
		if err == nil {
			resp.Body.Close()
		}
		return
	}
	if err != nil {
		r.Store(false)
		return
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	r.Store(resp.StatusCode == http.StatusOK)
}

// routes reports whether calls go to n: the harness has not taken it down
// and its last health check found it ready.
func (b *balancer) routes(n *Node) bool {
	r, ok := b.ready[n]
	return ok && r.Load() && n.serving()
}

// pick returns the next node round-robin from *i among the ready nodes,
// else (panic mode) among those the harness has not taken down; nil when
// the harness has taken down every one.
func (b *balancer) pick(nodes []*Node, i *int) *Node {
	if n := nextNode(nodes, i, b.routes); n != nil {
		return n
	}
	return nextNode(nodes, i, (*Node).serving)
}

// nextNode returns the first node from *i on (round-robin) that ok
// accepts, advancing *i past it; nil when ok accepts none.
func nextNode(nodes []*Node, i *int, ok func(*Node) bool) *Node {
	for range nodes {
		n := nodes[*i%len(nodes)]
		*i++
		if ok(n) {
			return n
		}
	}
	return nil
}
