package sink

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Sender delivers one event; nil means the sink acknowledged it.
type Sender interface {
	Send(ctx context.Context, ev cloudevents.Event) error
}

// HTTP posts events in structured mode (application/cloudevents+json) to
// a URL; a 2xx answer acknowledges.
type HTTP struct{ client cloudevents.Client }

var _ Sender = (*HTTP)(nil)

// NewHTTP returns a Sender posting to target, each request bounded by
// timeout.
func NewHTTP(target string, timeout time.Duration) (*HTTP, error) {
	c, err := cloudevents.NewClientHTTP(cehttp.WithTarget(target), cehttp.WithClient(http.Client{Timeout: timeout}))
	if err != nil {
		return nil, fmt.Errorf("sink: http client: %w", err)
	}
	return &HTTP{client: c}, nil
}

// Send posts ev.
func (h *HTTP) Send(ctx context.Context, ev cloudevents.Event) error {
	res := h.client.Send(cloudevents.WithEncodingStructured(ctx), ev)
	if !cloudevents.IsACK(res) {
		return fmt.Errorf("sink: http: %w", res)
	}
	return nil
}

// NATS publishes events in structured mode to a JetStream subject, with
// Nats-Msg-Id = the event id (the stream drops a resend within its
// duplicate window); the stream's acknowledgement acknowledges. A stream
// must capture the subject.
type NATS struct {
	js      jetstream.JetStream
	subject string
}

var _ Sender = (*NATS)(nil)

// NewNATS returns a Sender publishing on subject through js.
func NewNATS(js jetstream.JetStream, subject string) (*NATS, error) {
	if subject == "" {
		return nil, errors.New("sink: nats: empty subject")
	}
	return &NATS{js: js, subject: subject}, nil
}

// Send publishes ev and waits for the stream's acknowledgement.
func (n *NATS) Send(ctx context.Context, ev cloudevents.Event) error {
	body, err := ev.MarshalJSON()
	if err != nil {
		return fmt.Errorf("sink: nats: encode: %w", err)
	}
	msg := &nats.Msg{Subject: n.subject, Data: body, Header: nats.Header{}}
	msg.Header.Set("Content-Type", cloudevents.ApplicationCloudEventsJSON)
	msg.Header.Set(jetstream.MsgIDHeader, ev.ID())
	if _, err := n.js.PublishMsg(ctx, msg); err != nil {
		return fmt.Errorf("sink: nats: %w", err)
	}
	return nil
}
