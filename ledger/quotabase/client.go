package quotabase

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/quotaplatform/quota/limit"
)

// Client reads quota bases from the reconcilers over NATS: a
// limit.QuotaBases. It is safe for concurrent use.
type Client struct {
	nc      *nats.Conn
	subject string
	timeout time.Duration
}

// ClientConfig configures a Client. Start from DefaultClientConfig.
type ClientConfig struct {
	// Subject is where requests go: the Servers' Config.Subject. Default
	// DefaultSubject ("quota.base").
	Subject string
	// Timeout bounds one request when the caller's context has a later
	// deadline or none. Default 1s.
	Timeout time.Duration
}

// DefaultClientConfig returns the defaults documented on ClientConfig.
func DefaultClientConfig() ClientConfig {
	return ClientConfig{Subject: DefaultSubject, Timeout: time.Second}
}

var _ limit.QuotaBases = (*Client)(nil)

// NewClient returns a Client that sends requests on nc.
func NewClient(nc *nats.Conn, cfg ClientConfig) (*Client, error) {
	var errs []error
	if nc == nil {
		errs = append(errs, errors.New("quotabase: NewClient needs a NATS connection"))
	}
	if err := CheckSubject(cfg.Subject); err != nil {
		errs = append(errs, fmt.Errorf("quotabase: Subject: %w", err))
	}
	if cfg.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("quotabase: Timeout: must be positive, got %v", cfg.Timeout))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Client{nc: nc, subject: cfg.Subject, timeout: cfg.Timeout}, nil
}

// QuotaBase asks the reconcilers for key's spent cost in the usage windows
// that start in [start, end). Its errors say why there is none: a
// *FieldError (errors.Is ErrInvalidRequest) names the bad field; ErrBusy,
// ErrUnavailable and ErrNoReconciler are the reconcilers' side; a context
// error is the caller's. None quotes the key.
func (c *Client) QuotaBase(ctx context.Context, key string, start, end time.Time) (limit.QuotaBase, error) {
	data, err := json.Marshal(NewRequest(key, start, end))
	if err != nil {
		return limit.QuotaBase{}, fmt.Errorf("quotabase: encode request: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	msg, err := c.nc.RequestWithContext(rctx, c.subject, data)
	switch {
	case err == nil:
	case errors.Is(err, nats.ErrNoResponders):
		return limit.QuotaBase{}, fmt.Errorf("%w: no responders on %s (is a reconciler serving quota bases?)", ErrNoReconciler, c.subject)
	case ctx.Err() != nil: // the caller's deadline or cancellation
		return limit.QuotaBase{}, fmt.Errorf("quotabase: request on %s: %w", c.subject, ctx.Err())
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout):
		return limit.QuotaBase{}, fmt.Errorf("%w: no reply on %s within %v", ErrNoReconciler, c.subject, c.timeout)
	default:
		return limit.QuotaBase{}, fmt.Errorf("quotabase: request on %s: %w", c.subject, err)
	}
	var r Reply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return limit.QuotaBase{}, fmt.Errorf("quotabase: reply on %s is not JSON: %w", c.subject, err)
	}
	switch {
	case r.Error == "":
		return limit.QuotaBase{Total: r.Total, ByRegion: r.ByRegion, AsOf: r.AsOf}, nil
	case r.Field != "":
		return limit.QuotaBase{}, &FieldError{Field: r.Field, Msg: r.Error}
	case r.Error == msgBusy:
		return limit.QuotaBase{}, ErrBusy
	case r.Error == msgUnavailable:
		return limit.QuotaBase{}, ErrUnavailable
	default:
		return limit.QuotaBase{}, fmt.Errorf("quotabase: the reconciler answered: %s", r.Error)
	}
}
