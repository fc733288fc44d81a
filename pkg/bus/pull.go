package bus

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// PullExpiry bounds each pull request of the services' pull consumers
// (the debouncer's on the change stream, the pusher's on PUSHES). A pull
// request the server never gets, or forgets, leaves a consumer waiting for
// messages that are not coming until it misses two idle heartbeats, which
// nats.go sends for half the expiry: with its default 30 s pulls that is
// 30 s without a push. At 5 s a lost pull costs at most 5 s, for one
// request every 5 s while the stream is quiet.
const PullExpiry = 5 * time.Second

// PullMessages is the options of a services' Messages iterator taking up
// to max messages a pull.
func PullMessages(max int) []jetstream.PullMessagesOpt {
	return []jetstream.PullMessagesOpt{jetstream.PullMaxMessages(max), jetstream.PullExpiry(PullExpiry)}
}
