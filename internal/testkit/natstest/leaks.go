package natstest

import "go.uber.org/goleak"

// UpstreamLeaks are the goleak options every package whose tests write to
// a JetStream object store (snapshots) needs. In nats.go v1.55 the
// JetStream context an ObjectStore.Put makes starts
// resetPendingAcksOnReconnect, which reads its status channel under the
// publisher lock after the goroutine starts; when Put's deferred
// cleanupReplySub takes the lock first and sets the channel to nil, the
// goroutine blocks on the nil channel for good (jetstream/publish.go
// newAsyncReply, jetstream.go cleanupReplySub). That leak is upstream's,
// one goroutine per unlucky Put; every other goroutine is still checked.
func UpstreamLeaks() []goleak.Option {
	return []goleak.Option{goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect")}
}
