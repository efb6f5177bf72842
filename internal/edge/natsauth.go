package edge

import (
	"errors"

	"github.com/nats-io/nats.go"
)

// NATSAuth is how a daemon authenticates to NATS and verifies it: one of a
// user and password (the shipped configuration's roles, README "Security")
// or a credentials file (decentralised JWT auth), and TLS files. Both
// daemons take it from the same flags (--nats-user, --nats-password,
// --nats-creds, --nats-tls-ca, --nats-tls-cert, --nats-tls-key).
type NATSAuth struct {
	User     string
	Password Secret
	Creds    string
	TLSCA    string
	TLSCert  string
	TLSKey   string
}

// Validate reports the first inconsistent setting, naming its flag.
func (a NATSAuth) Validate() error {
	switch {
	case (a.User == "") != (a.Password == ""):
		return errors.New("--nats-user and --nats-password: give both or neither")
	case a.User != "" && a.Creds != "":
		return errors.New("--nats-creds: give either a credentials file or --nats-user, not both")
	case (a.TLSCert == "") != (a.TLSKey == ""):
		return errors.New("--nats-tls-cert: needs --nats-tls-key and the other way round")
	}
	return nil
}

// Options are the nats.Options that apply a.
func (a NATSAuth) Options() []nats.Option {
	var opts []nats.Option
	if a.User != "" {
		opts = append(opts, nats.UserInfo(a.User, string(a.Password)))
	}
	if a.Creds != "" {
		opts = append(opts, nats.UserCredentials(a.Creds))
	}
	if a.TLSCA != "" {
		opts = append(opts, nats.RootCAs(a.TLSCA))
	}
	if a.TLSCert != "" {
		opts = append(opts, nats.ClientCert(a.TLSCert, a.TLSKey))
	}
	return opts
}
