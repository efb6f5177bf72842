package rls_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Servers, clients and watchers stopped by a test leave no goroutine.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
