package catalog_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The watch goroutine must end with Stop.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
