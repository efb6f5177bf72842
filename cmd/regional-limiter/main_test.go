package main

import (
	"testing"

	"go.uber.org/goleak"
)

// A stopped daemon leaves no goroutine behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
