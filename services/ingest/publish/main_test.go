package publish_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The snapshot tests write snapshots with nats.go's ObjectStore.Put. In
// nats.go v1.55 Put's own JetStream context starts
// resetPendingAcksOnReconnect, which reads its status channel under the
// publisher lock after the goroutine starts; when Put's deferred
// cleanupReplySub takes the lock first and sets the channel to nil, the
// goroutine blocks on the nil channel for good (jetstream/publish.go
// newAsyncReply, jetstream.go cleanupReplySub). That leak is upstream's,
// one goroutine per unlucky Put; every other goroutine is checked.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"))
}
