package e2e

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
)

// Snapshot writes meet nats.go's own leak on ObjectStore.Put
// (natstest.UpstreamLeaks); every other goroutine is checked.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, natstest.UpstreamLeaks()...)
}
