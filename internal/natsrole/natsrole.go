// Package natsrole names the NATS users (roles) of the shipped server
// configuration (deploy/terraform/modules/region/nats.conf.tftpl, rendered
// by internal/natsconf) and gives each role inboxes of its own.
//
// A reply (a quota base, a JetStream API answer, a pull consumer's
// delivery of usage reports) goes to the requester's inbox subject. With
// nats.go's default prefix every client's inboxes are under _INBOX., and a
// role allowed to subscribe to _INBOX.> hears every other role's replies:
// a limiter would read the reconciler's deliveries, every region's keys
// and counts. So each role's clients connect with their role's prefix
// (Inbox), and the shipped configuration lets each role subscribe only
// under its own (InboxPrefix).
//
// The prefixes lie under _INBOX. so that a server configuration that
// still allows _INBOX.> (before the roles were split) accepts the new
// clients: roll out the clients first, then the configuration.
package natsrole

import "github.com/nats-io/nats.go"

// The users of the shipped configuration, besides Limiter's.
const (
	// ControlPlane is the control-plane limiter (regional-limiter
	// --control-plane), which also writes the catalogue.
	ControlPlane = "control-plane"
	// Reconciler consumes the usage stream and answers quota bases.
	Reconciler = "reconciler"
)

// Limiter is the user of region's limiters (all of a region's limiter
// processes share it). region is a NATS subject token (no '.', '*', '>').
func Limiter(region string) string { return "limiter-" + region }

// LimiterProcess is the user of one limiter process of region when the
// configuration gives each process its own credential
// (internal/natsconf, Params.Processes): "limiter-<region>.<process>",
// process being its identity (ledger.Identity: a pod name), a subject
// token. Its inbox prefix lies under its region's (Limiter), so that
// replies addressed to the region's limiters reach it, and another
// process's inboxes do not.
func LimiterProcess(region, process string) string { return Limiter(region) + "." + process }

// LimiterOrControlPlane is the user of a limiter process of region:
// ControlPlane when it writes the catalogue, else Limiter(region).
func LimiterOrControlPlane(region string, controlPlane bool) string {
	if controlPlane {
		return ControlPlane
	}
	return Limiter(region)
}

// InboxPrefix is the inbox prefix of user's connections, "_INBOX." + user:
// their inboxes are InboxPrefix(user) + ".<unique>", and the shipped
// configuration lets user subscribe to InboxPrefix(user) + ".>" alone.
func InboxPrefix(user string) string { return "_INBOX." + user }

// Inbox is the nats.Option that gives a connection of user's role its
// role's inbox prefix. Every client of the shipped configuration needs it:
// without it, its requests' replies go to inboxes it may not subscribe to.
func Inbox(user string) nats.Option { return nats.CustomInboxPrefix(InboxPrefix(user)) }
