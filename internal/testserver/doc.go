// Package testserver starts real services for tests: a private redis-server on
// a free port, an in-process NATS server with JetStream, and a fresh Postgres
// database. Each is stopped by t.Cleanup. A missing server binary fails the
// test with the name of the Debian package that provides it.
package testserver
