package e2e

import (
	"testing"

	"go.uber.org/goleak"
)

// nats.go v1.55's ObjectStore.Put (snapshot writes) can leave one
// resetPendingAcksOnReconnect goroutine blocked on a nil channel: Put's
// deferred cleanupReplySub may clear the channel before the goroutine it
// started reads it. The leak is upstream's; see
// services/ingest/publish/main_test.go.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"))
}
