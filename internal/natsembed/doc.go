// Package natsembed runs a NATS server with JetStream inside the process,
// for a regional limiter started without --nats: the catalogue bucket (and
// anything else on JetStream) then lives in the process's data directory.
//
// By default the server opens no port at all; clients in the same process
// connect with ConnectOption. Set Config.Listen to accept other clients.
// Start starts the server's goroutines and Stop shuts them down and waits.
package natsembed
