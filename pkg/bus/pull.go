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

// Pulls of a consumer that replays a history before it follows it (a
// frontend's start). The services' other consumers take nats.go's 500
// messages a pull; a replay takes as many as fit in ReplayPullBytes at
// the stream's average record size, at least those 500 and at most
// ReplayPullMessages. A fresh frontend replaying the 20,000 records of a
// 10000x10 mesh from the stream (about 1 KiB a record, so 4096 a pull)
// was ready in 205 ms instead of 238, faster in 8 starts of 8
// (docs/benchmarks.md). Sizing by bytes keeps large records at nats.go's
// 500 a pull: what a pull buffers in the client counts against a
// subscription's 64 MiB (nats.go's pending limit), past which it drops
// messages and the ordered consumer starts over.
//
// The server's own byte cap on a pull (PullMaxMessagesWithBytesLimit) is
// not used: with an ordered consumer, pulls cut at the cap skipped
// records without a gap the consumer could see (2 of 40 records of
// 900 KiB under a 16 MiB cap were never delivered, and the follower passed
// the last sequence; nats-server 2.15.2, nats.go 1.55.0), where a count
// alone delivered all 40 (TestFollowerReplaysLargeRecords).
const (
	ReplayPullMessages  = 4096
	ReplayPullBytes     = 16 << 20
	defaultPullMessages = 500 // nats.go's for Consume
)

// ReplayPullSize is the messages a replay pull asks for, from the stream's
// state at the start.
func ReplayPullSize(st jetstream.StreamState) int {
	if st.Msgs == 0 || st.Bytes == 0 {
		return ReplayPullMessages
	}
	avg := max(st.Bytes/st.Msgs, 1)
	return int(min(max(ReplayPullBytes/avg, defaultPullMessages), ReplayPullMessages))
}

// ReplayConsume is PullConsume for a consumer that replays the history
// whose state at the start is st.
func ReplayConsume(st jetstream.StreamState) []jetstream.PullConsumeOpt {
	return append(PullConsume(), jetstream.PullMaxMessages(ReplayPullSize(st)))
}
