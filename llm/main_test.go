package llm

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when any test leaves a goroutine behind
// (a stream reader, a connection of the keep-alive pool, a server handler).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
