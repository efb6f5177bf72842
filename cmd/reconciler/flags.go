package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/peterbourgon/ff/v3"
)

// options are the reconciler's settings from flags and environment.
type options struct {
	NATS        string
	NATSCreds   string
	NATSTLSCA   string
	NATSTLSCert string
	NATSTLSKey  string
	Postgres    string
	Listen      string
	LogLevel    string

	Stream        string
	Durable       string
	BatchSize     int
	BatchInterval time.Duration

	// usage subcommand
	Key         string
	From, To    string
	Granularity string
	Format      string
}

func defaultOptions() options {
	return options{
		NATS:          "nats://127.0.0.1:4222",
		Postgres:      "postgres://postgres@127.0.0.1:5432/quota?sslmode=disable",
		Listen:        ":8081",
		LogLevel:      "info",
		Stream:        "QUOTA_USAGE",
		Durable:       "reconciler",
		BatchSize:     5000,
		BatchInterval: 200 * time.Millisecond,
		Granularity:   "hour",
		Format:        "json",
	}
}

// envPrefix is the prefix of every flag's environment variable:
// --batch-interval reads QUOTA_BATCH_INTERVAL.
const envPrefix = "QUOTA"

// parseFlags parses a subcommand's flags with ff. Every flag also reads its
// environment variable QUOTA_<FLAG> (upper case, dashes to underscores); a
// flag on the command line wins, and an empty variable counts as unset.
// Only the subcommand's own flags are read, from either source.
func parseFlags(cmd string, args []string, stderr io.Writer) (options, error) {
	o := defaultOptions()
	fs := flag.NewFlagSet("reconciler "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.Postgres, "postgres", o.Postgres, "Postgres URL (sslmode in the URL, e.g. ?sslmode=verify-full)")
	fs.StringVar(&o.LogLevel, "log-level", o.LogLevel, "debug, info, warn or error")
	if cmd == "serve" {
		fs.StringVar(&o.NATS, "nats", o.NATS, "NATS URL (comma-separated list allowed)")
		fs.StringVar(&o.NATSCreds, "nats-creds", "", "NATS credentials file")
		fs.StringVar(&o.NATSTLSCA, "nats-tls-ca", "", "CA file to verify the NATS server")
		fs.StringVar(&o.NATSTLSCert, "nats-tls-cert", "", "client certificate for NATS")
		fs.StringVar(&o.NATSTLSKey, "nats-tls-key", "", "client key for NATS")
		fs.StringVar(&o.Listen, "listen", o.Listen, "HTTP address for /v1/usage, /metrics, /healthz, /readyz")
		fs.StringVar(&o.Stream, "stream", o.Stream, "JetStream stream of usage reports")
		fs.StringVar(&o.Durable, "durable", o.Durable, "durable consumer name")
		fs.IntVar(&o.BatchSize, "batch-size", o.BatchSize, "most reports per Postgres transaction")
		fs.DurationVar(&o.BatchInterval, "batch-interval", o.BatchInterval, "longest wait to fill a batch")
	}
	if cmd == "usage" {
		fs.StringVar(&o.Key, "key", "", "API key (required)")
		fs.StringVar(&o.From, "from", "", "start, RFC 3339 (required)")
		fs.StringVar(&o.To, "to", "", "end, RFC 3339, exclusive (required)")
		fs.StringVar(&o.Granularity, "granularity", o.Granularity, "hour, day or window")
		fs.StringVar(&o.Format, "format", o.Format, "json or csv")
	}
	if err := ff.Parse(fs, args, ff.WithEnvVarPrefix(envPrefix)); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return o, o.validate(cmd)
}

func (o *options) validate(cmd string) error {
	if _, err := url.Parse(o.Postgres); err != nil || o.Postgres == "" {
		return errors.New("--postgres: not a URL")
	}
	switch cmd {
	case "serve":
		if o.NATS == "" {
			return errors.New("--nats: required")
		}
		if (o.NATSTLSCert == "") != (o.NATSTLSKey == "") {
			return errors.New("--nats-tls-cert and --nats-tls-key: give both or neither")
		}
		if o.BatchSize < 1 {
			return fmt.Errorf("--batch-size: must be at least 1, got %d", o.BatchSize)
		}
		if o.BatchInterval <= 0 {
			return fmt.Errorf("--batch-interval: must be positive, got %v", o.BatchInterval)
		}
	case "usage":
		if o.Format != "json" && o.Format != "csv" {
			return fmt.Errorf("--format: must be json or csv, got %q", o.Format)
		}
	}
	return nil
}

// redact hides passwords in a URL or a comma-separated list of URLs, for
// logs.
func redact(urls string) string {
	parts := strings.Split(urls, ",")
	for i, p := range parts {
		u, err := url.Parse(strings.TrimSpace(p))
		if err != nil {
			parts[i] = "<unparsable>"
			continue
		}
		if u.User != nil {
			if _, has := u.User.Password(); has {
				u.User = url.UserPassword(u.User.Username(), "xxxxx")
			}
		}
		q := u.Query()
		for k := range q {
			if lk := strings.ToLower(k); lk == "password" || lk == "sslpassword" {
				q.Set(k, "xxxxx")
			}
		}
		u.RawQuery = q.Encode()
		parts[i] = u.String()
	}
	return strings.Join(parts, ",")
}
