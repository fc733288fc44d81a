package faults

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestLastMsgReadsTheLastPushRequest: lastMsg gives nil for an empty
// stream, then the last message, the one whose through waitPushed reads.
func TestLastMsgReadsTheLastPushRequest(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	_, js := natstest.Connect(t, natstest.Start(t))
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "P", Subjects: []string{"p"}}); err != nil {
		t.Fatal(err)
	}
	if m, err := lastMsg(ctx, js, "P"); err != nil || m != nil {
		t.Fatalf("empty stream: %v, %v; want nil, nil", m, err)
	}
	for _, through := range []uint64{5, 9, 7} {
		b, err := proto.Marshal(&pb.PushRequest{ThroughSeq: through})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := js.Publish(ctx, "p", b); err != nil {
			t.Fatal(err)
		}
	}
	m, err := lastMsg(ctx, js, "P")
	if err != nil || m == nil {
		t.Fatalf("lastMsg: %v, %v", m, err)
	}
	if through, err := throughOf(*m); err != nil || m.seq != 3 || through != 7 {
		t.Fatalf("last message seq %d through %d (%v), want seq 3 through 7", m.seq, through, err)
	}
	if _, err := lastMsg(ctx, js, "missing"); err == nil {
		t.Fatal("a missing stream read without an error")
	}
}
