package multiregion

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

func TestBalancerCheck(t *testing.T) {
	var status atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(int(status.Load()))
	}))
	n := &Node{listen: strings.TrimPrefix(srv.URL, "http://")}
	b := newBalancer([]*Node{n}, 0)
	ctx := context.Background()
	for _, step := range []struct {
		name   string
		status int32 // 0: server closed
		want   bool
	}{
		{"ready", http.StatusOK, true},
		{"draining", http.StatusServiceUnavailable, false},
		{"ready again", http.StatusOK, true},
		{"gone", 0, false},
	} {
		if step.status == 0 {
			srv.Close()
		}
		status.Store(step.status)
		b.checkAll(ctx)
		if got := b.routes(n); got != step.want {
			t.Fatalf("%s: routes = %v, want %v", step.name, got, step.want)
		}
	}
}

func TestBalancerPick(t *testing.T) {
	for _, tc := range []struct {
		name    string
		ready   string // per node: r ready, - not ready
		down    string // per node: d taken down by the harness, - not
		want    string // node indexes picked by four calls from 0, x for nil
		comment string
	}{
		{"all ready", "rrr", "---", "0120", "round-robin"},
		{"one draining", "r-r", "---", "0202", "the node whose /readyz fails gets nothing"},
		{"none ready", "---", "---", "0120", "panic mode: all of them"},
		{"none ready, one taken down", "---", "-d-", "0202", "panic mode keeps off what the harness took down"},
		{"ready but taken down", "rrr", "d--", "1212", "the harness's word wins over /readyz"},
		{"all taken down", "rrr", "ddd", "xxxx", "no node"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := make([]*Node, len(tc.ready))
			for k := range nodes {
				nodes[k] = &Node{Index: k, down: tc.down[k] == 'd'}
			}
			b := newBalancer(nodes, 0)
			for k, n := range nodes {
				b.ready[n].Store(tc.ready[k] == 'r')
			}
			var got strings.Builder
			i := 0
			for range 4 {
				n := b.pick(nodes, &i)
				if n == nil {
					got.WriteByte('x')
					continue
				}
				got.WriteByte(byte('0' + n.Index))
			}
			if got.String() != tc.want {
				t.Fatalf("picked %s, want %s (%s)", got.String(), tc.want, tc.comment)
			}
		})
	}
}
