package main

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strings"
	"time"

	"github.com/quotaplatform/quota/catalog"
	"github.com/quotaplatform/quota/internal/limitapi"
	"github.com/quotaplatform/quota/rls"
)

// rlsActor is recorded as the writer of rate limit service domains, as
// limitapi records "admin" for plans, keys and costs (one admin token).
const rlsActor = "admin"

// rlsRoutes are the control-plane routes of the rate limit service's
// rules stored in the catalogue: one domain's envoyproxy/ratelimit YAML
// per entry, pushed to every process; those with --rls-config catalog:
// serve them on --grpc-listen. They are in every daemon's route table,
// --grpc-listen or not: the control plane need not serve gRPC.
func rlsRoutes(cat *catalog.Catalog, log *slog.Logger) []limitapi.Route {
	h := rlsHandlers{cat: cat, log: log.With("component", "rls")}
	return []limitapi.Route{
		{Pattern: "GET /v1/rls/{domain}", Access: limitapi.AccessRead, Caller: "operators: a rate limit service domain's YAML in the catalogue",
			Handler: http.HandlerFunc(h.get)},
		{Pattern: "PUT /v1/rls/{domain}", Access: limitapi.AccessAdmin, Caller: "operators: store a rate limit service domain's YAML in the catalogue",
			Handler: http.HandlerFunc(h.put)},
		{Pattern: "DELETE /v1/rls/{domain}", Access: limitapi.AccessAdmin, Caller: "operators: remove a rate limit service domain from the catalogue",
			Handler: http.HandlerFunc(h.delete)},
	}
}

type rlsHandlers struct {
	cat *catalog.Catalog
	log *slog.Logger
}

// rlsError is the JSON of a refused request: what is wrong, the field,
// and for a configuration that does not parse the line of the body.
type rlsError struct {
	Error string `json:"error"`
	Field string `json:"field,omitempty"`
	Line  int    `json:"line,omitempty"`
}

// rlsDomain reads and checks the path's domain.
func rlsDomain(w http.ResponseWriter, r *http.Request) (string, bool) {
	d := r.PathValue("domain")
	if err := catalog.CheckName("domain", d); err != nil {
		writeStatus(w, http.StatusBadRequest, rlsError{Error: err.Error(), Field: "domain"})
		return "", false
	}
	return d, true
}

// put serves PUT /v1/rls/{domain}: the body is the domain's YAML, at most
// catalog.MaxRLSBytes. 204 once written and applied here; 400 naming the
// line and field of a configuration that does not parse (nothing is
// written); 413 for a larger body; 503 while the catalogue cannot be
// written.
func (h rlsHandlers) put(w http.ResponseWriter, r *http.Request) {
	domain, ok := rlsDomain(w, r)
	if !ok {
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, catalog.MaxRLSBytes))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeStatus(w, http.StatusRequestEntityTooLarge, rlsError{
			Error: fmt.Sprintf("the body is over %d bytes, the most one domain's YAML may hold", catalog.MaxRLSBytes), Field: "body"})
		return
	case err != nil:
		writeStatus(w, http.StatusBadRequest, rlsError{Error: "reading the body: " + err.Error(), Field: "body"})
		return
	}
	_, err = rls.PutDomain(r.Context(), h.cat, rlsActor, domain, body)
	var ce *rls.ConfigError
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.As(err, &ce):
		field := ce.Field
		if field == "" {
			field = "body" // the YAML as a whole: a syntax error, an empty body
		}
		writeStatus(w, http.StatusBadRequest, rlsError{Error: err.Error(), Field: field, Line: ce.Line})
	default:
		h.writeError(w, err)
	}
}

// writeError answers a failed catalogue write or delete.
func (h rlsHandlers) writeError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, catalog.ErrInvalidName):
		writeStatus(w, http.StatusBadRequest, rlsError{Error: err.Error(), Field: "domain"})
	case errors.Is(err, catalog.ErrInvalidValue):
		writeStatus(w, http.StatusBadRequest, rlsError{Error: err.Error(), Field: "body"})
	case errors.Is(err, catalog.ErrNotFound):
		writeStatus(w, http.StatusNotFound, rlsError{Error: err.Error(), Field: "domain"})
	case errors.Is(err, catalog.ErrReadOnly):
		writeStatus(w, http.StatusForbidden, rlsError{Error: "this process does not write the catalogue: send rate limit rules to the control plane"})
	case errors.Is(err, catalog.ErrUnavailable):
		h.log.Warn("catalogue write failed", "err", err)
		writeStatus(w, http.StatusServiceUnavailable, rlsError{Error: "the catalogue cannot be written now (NATS unreachable); retry later"})
	default:
		h.log.Error("catalogue write failed", "err", err)
		writeStatus(w, http.StatusInternalServerError, rlsError{Error: "the catalogue write failed"})
	}
}

// rlsAnswer is GET /v1/rls/{domain}'s JSON.
type rlsAnswer struct {
	Domain    string    `json:"domain"`
	YAML      string    `json:"yaml"`
	Actor     string    `json:"actor"`
	UpdatedAt time.Time `json:"updated_at,omitzero"`
	Revision  uint64    `json:"revision,omitempty"`
}

// get serves GET /v1/rls/{domain}: the stored YAML with who wrote it and
// when, as JSON; with Accept: application/yaml, the YAML alone.
func (h rlsHandlers) get(w http.ResponseWriter, r *http.Request) {
	domain, ok := rlsDomain(w, r)
	if !ok {
		return
	}
	e, ok := h.cat.RLSEntry(domain)
	if !ok {
		writeStatus(w, http.StatusNotFound, rlsError{Error: fmt.Sprintf("domain %q is not in the catalogue", domain), Field: "domain"})
		return
	}
	if wantsYAML(r) {
		w.Header().Set("Content-Type", "application/yaml")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, e.YAML)
		return
	}
	writeStatus(w, http.StatusOK, rlsAnswer{Domain: e.Name, YAML: e.YAML, Actor: e.Actor, UpdatedAt: e.At, Revision: e.Revision})
}

// wantsYAML: the request's Accept names application/yaml (or the older
// application/x-yaml, text/yaml) first.
func wantsYAML(r *http.Request) bool {
	accept := r.Header.Get("Accept")
	if accept == "" {
		return false
	}
	first, _, _ := strings.Cut(accept, ",")
	mt, _, err := mime.ParseMediaType(first)
	return err == nil && (mt == "application/yaml" || mt == "application/x-yaml" || mt == "text/yaml")
}

// delete serves DELETE /v1/rls/{domain}: 204, or 404 when the catalogue
// has no such domain.
func (h rlsHandlers) delete(w http.ResponseWriter, r *http.Request) {
	domain, ok := rlsDomain(w, r)
	if !ok {
		return
	}
	if _, err := h.cat.Delete(r.Context(), rlsActor, catalog.KindRLS, domain); err != nil {
		h.writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
