package publish_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
)

// The snapshot tests write snapshots with nats.go's ObjectStore.Put,
// whose own leak natstest.UpstreamLeaks describes and ignores.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, natstest.UpstreamLeaks()...)
}
