package natsrole_test

import (
	"fmt"

	"github.com/quotaplatform/quota/internal/natsrole"
)

// A limiter of eu that dials NATS itself (participant.Options.NATS) gives
// its connection the role's inbox prefix:
//
//	nc, err := nats.Connect(url, nats.UserInfo(user, password), natsrole.Inbox(user))
func ExampleInboxPrefix() {
	for _, user := range []string{
		natsrole.LimiterOrControlPlane("eu", false),
		natsrole.LimiterProcess("eu", "limiter-eu-0"),
		natsrole.LimiterOrControlPlane("eu", true),
		natsrole.Reconciler,
	} {
		fmt.Println(user, natsrole.InboxPrefix(user)+".>")
	}
	// Output:
	// limiter-eu _INBOX.limiter-eu.>
	// limiter-eu.limiter-eu-0 _INBOX.limiter-eu.limiter-eu-0.>
	// control-plane _INBOX.control-plane.>
	// reconciler _INBOX.reconciler.>
}
