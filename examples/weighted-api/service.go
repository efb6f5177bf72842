package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/quotaplatform/quota/httplimit"
	"github.com/quotaplatform/quota/internal/edge"
	"github.com/quotaplatform/quota/participant"
)

// The API's two endpoints and their weights: a report prices several
// symbols and costs five quotes. The weights live in the catalogue under
// the endpoint names, so the control plane can change them without a
// deploy (PUT /v1/costs/report on a daemon with the admin token).
const (
	quoteRoute  = "GET /v1/quotes/{symbol}"
	reportRoute = "POST /v1/reports"

	quoteEndpoint  = "quote"
	reportEndpoint = "report"
)

// endpointNames name the routes in the catalogue: short names are easier
// to write in the control plane than route paths (httplimit.RoutePath, the
// middleware's default).
var endpointNames = map[string]string{quoteRoute: quoteEndpoint, reportRoute: reportEndpoint}

// endpointOf is the middleware's Config.Endpoint: the matched route's name.
func endpointOf(r *http.Request) string {
	if name, ok := endpointNames[r.Pattern]; ok {
		return name
	}
	return httplimit.RoutePath(r)
}

// defaultCosts are written to the catalogue at start when this process is
// its own control plane (embedded NATS) and the catalogue has none yet.
var defaultCosts = map[string]int64{quoteEndpoint: 1, reportEndpoint: 5}

// newAPIMux serves the API (startService adds the participant's
// operator routes, behind --read-token, readiness and metrics). limit wraps
// each limited route's handler, which the mux calls after matching, so
// that the middleware sees the matched pattern (endpointOf: the endpoint
// whose weight is the cost). Each route checks its input first: a
// malformed request is refused before it can spend the caller's quota.
// Health, readiness and metrics are not limited.
func newAPIMux(limit func(http.Handler) http.Handler) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle(quoteRoute, checkFirst(checkQuote, limit(http.HandlerFunc(serveQuote))))
	mux.Handle(reportRoute, checkFirst(checkReport, limit(http.HandlerFunc(serveReport))))
	return mux
}

// checkFirst runs check before next (the limiter, then the handler): a
// request check refuses, having written its 400, spends nothing. check
// returns the request to pass on, which may carry its parsed body.
func checkFirst(check func(http.ResponseWriter, *http.Request) (*http.Request, bool), next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r, ok := check(w, r); ok {
			next.ServeHTTP(w, r)
		}
	})
}

// quote is a symbol's price. Prices are made up from the symbol's hash:
// the example is about the limiter, not about market data.
type quote struct {
	Symbol   string  `json:"symbol"`
	Price    float64 `json:"price"`
	Currency string  `json:"currency"`
}

func priceOf(symbol string) quote {
	h := fnv.New32a()
	h.Write([]byte(symbol))
	return quote{Symbol: symbol, Price: float64(h.Sum32()%100000) / 100, Currency: "USD"}
}

// validSymbol: 1 to 8 upper-case letters.
func validSymbol(s string) bool {
	if len(s) == 0 || len(s) > 8 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 'A' || s[i] > 'Z' {
			return false
		}
	}
	return true
}

func checkQuote(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	if !validSymbol(r.PathValue("symbol")) {
		httplimit.WriteError(w, http.StatusBadRequest, "symbol", "symbol: want 1 to 8 upper-case letters")
		return r, false
	}
	return r, true
}

func serveQuote(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, priceOf(r.PathValue("symbol")))
}

// maxReportSymbols bounds a report, and with it the body.
const maxReportSymbols = 20

type reportRequest struct {
	Symbols []string `json:"symbols"`
}

type reportAnswer struct {
	Quotes  []quote `json:"quotes"`
	Average float64 `json:"average"`
}

// reportKey is the context key of a report's checked body.
type reportKey struct{}

// checkReport decodes and checks a report's body, and passes it on in the
// request's context.
func checkReport(w http.ResponseWriter, r *http.Request) (*http.Request, bool) {
	var req reportRequest
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		httplimit.WriteError(w, http.StatusBadRequest, "body", "body: want {\"symbols\":[…]}: "+err.Error())
		return r, false
	}
	if dec.More() {
		httplimit.WriteError(w, http.StatusBadRequest, "body", "body: want one JSON object")
		return r, false
	}
	if len(req.Symbols) == 0 || len(req.Symbols) > maxReportSymbols {
		httplimit.WriteError(w, http.StatusBadRequest, "symbols", fmt.Sprintf("symbols: want 1 to %d", maxReportSymbols))
		return r, false
	}
	for i, s := range req.Symbols {
		if !validSymbol(s) {
			field := fmt.Sprintf("symbols[%d]", i)
			httplimit.WriteError(w, http.StatusBadRequest, field, field+": want 1 to 8 upper-case letters")
			return r, false
		}
	}
	return r.WithContext(context.WithValue(r.Context(), reportKey{}, req)), true
}

func serveReport(w http.ResponseWriter, r *http.Request) {
	req := r.Context().Value(reportKey{}).(reportRequest) // set by checkReport
	ans := reportAnswer{Quotes: make([]quote, 0, len(req.Symbols))}
	for _, s := range req.Symbols {
		q := priceOf(s)
		ans.Quotes = append(ans.Quotes, q)
		ans.Average += q.Price / float64(len(req.Symbols))
	}
	writeJSON(w, http.StatusOK, ans)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// service is the running example: the participant and the HTTP server in
// front of it.
type service struct {
	p    *participant.Participant
	srv  *http.Server
	addr net.Addr
	done chan struct{} // closed when Serve returns
	log  *slog.Logger
}

// startService opens the participant (it joins the region, or runs on
// embedded defaults), writes the endpoint weights when it is its own
// control plane, and serves the API on cfg.listen.
func startService(ctx context.Context, cfg config, log *slog.Logger) (*service, error) {
	reg := prometheus.NewRegistry()
	po := cfg.participant
	po.Logger, po.Registerer = log, reg
	p, err := participant.Open(ctx, po)
	if err != nil {
		return nil, err
	}
	s := &service{p: p, log: log, done: make(chan struct{})}
	if err := s.seedCosts(ctx); err != nil {
		return nil, errors.Join(err, p.Close(ctx))
	}
	limit, err := p.Middleware(httplimit.Config{Endpoint: endpointOf}) // key: the X-API-Key header
	if err != nil {
		return nil, errors.Join(err, p.Close(ctx))
	}
	mux := newAPIMux(limit)
	if _, err := p.MountOperatorRoutes(mux, cfg.readTokens); err != nil {
		return nil, errors.Join(err, p.Close(ctx))
	}
	mux.Handle("GET /readyz", p.ReadyHandler())
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", cfg.listen)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("--listen %s: %w", cfg.listen, err), p.Close(ctx))
	}
	s.addr = ln.Addr()
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 2 * time.Second, ReadTimeout: 5 * time.Second,
		WriteTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() {
		defer close(s.done)
		// A new connection waits for its first request as long as a kept-alive one
		// does for its next (internal/edge.IdleUntilFirstByte says why).
		if err := s.srv.Serve(edge.IdleUntilFirstByte(ln, s.srv.IdleTimeout)); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server failed", "err", err)
		}
	}()
	log.Info("serving", "addr", s.addr.String())
	return s, nil
}

// seedCosts writes the default endpoint weights that the catalogue lacks,
// when this process may write it (embedded NATS); with a real region the
// control plane writes them (README).
func (s *service) seedCosts(ctx context.Context) error {
	if !s.p.Options().ControlPlane {
		return nil
	}
	for endpoint, cost := range defaultCosts {
		if _, ok := s.p.Catalog().Cost(endpoint); ok {
			continue
		}
		if _, err := s.p.Catalog().PutCost(ctx, "weighted-api", endpoint, cost); err != nil {
			return fmt.Errorf("write the weight of %s: %w", endpoint, err)
		}
	}
	return nil
}

// stop stops serving (requests in flight finish), then closes the
// participant: its limiter drains and its reporter sends final reports.
func (s *service) stop(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	<-s.done
	return errors.Join(err, s.p.Close(ctx))
}
