// Command regional-limiter is the regional rate limiter daemon: the check
// API (/v1/allow), the control plane (/v1/limits, /v1/keys, /v1/costs),
// metrics and health, over a region.Limiter whose store is Redis (--redis)
// or in process, and whose plan catalogue is pushed over NATS JetStream
// (--nats, or an embedded server). The route table in server.go says who
// may call each route (--check-token, --read-token, --admin-token). On
// SIGTERM it fails /readyz, keeps serving for --shutdown-delay, then stops.
// See README.md in this directory.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"go.uber.org/fx"
)

func main() {
	o, err := parseOptions(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "regional-limiter:", err)
		os.Exit(2)
	}
	app := fx.New(appOptions(o, os.Stderr))
	if err := app.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "regional-limiter:", err)
		os.Exit(1)
	}
	app.Run() // until SIGINT or SIGTERM, then a graceful stop
}
