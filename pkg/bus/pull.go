package bus

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// PullExpiry and PullHeartbeat shape every pull request of the services'
// consumers (the debouncer's on the change stream, the pusher's on PUSHES,
// the frontends' ordered ones). A pull request the server never gets, or
// forgets (its stream's leader changed), leaves a consumer waiting for
// messages that are not coming until it misses two idle heartbeats: with
// nats.go's defaults (30 s pulls, heartbeats every 15 s) that is 30 s
// without a push. Here it is 2 s, for one pull request every 5 s and one
// heartbeat a second while a stream is quiet.
const (
	PullExpiry    = 5 * time.Second
	PullHeartbeat = time.Second
)

// PullMessages is the options of a services' Messages iterator taking up
// to max messages a pull.
func PullMessages(max int) []jetstream.PullMessagesOpt {
	return []jetstream.PullMessagesOpt{jetstream.PullMaxMessages(max), jetstream.PullExpiry(PullExpiry), jetstream.PullHeartbeat(PullHeartbeat)}
}

// PullConsume is the same for a Consume callback.
func PullConsume() []jetstream.PullConsumeOpt {
	return []jetstream.PullConsumeOpt{jetstream.PullExpiry(PullExpiry), jetstream.PullHeartbeat(PullHeartbeat)}
}
