package natstest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestPublishRecordsThroughAStall: when the server holds its acks for
// longer than nats.go waits for a free publish slot (a busy server did so
// in CI: "stalled with too many outstanding async published messages"),
// PublishRecords waits for the acks it has and goes on, and the stream
// holds every record once, in order.
func TestPublishRecordsThroughAStall(t *testing.T) {
	url := natstest.Start(t)
	proxy := natstest.NewDropProxy(t, strings.TrimPrefix(url, "nats://"))
	nc, _ := natstest.Connect(t, "nats://"+proxy.Addr())
	// Four publishes may await acks; nats.go's stall wait (200 ms) is
	// shorter than the hold below.
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(4))
	if err != nil {
		t.Fatal(err)
	}
	names, err := bus.NewNames("pw")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	if _, err := bus.EnsureStream(ctx, js, names.ChangesConfig(bus.StreamOptions{})); err != nil {
		t.Fatal(err)
	}
	const n = 40
	var recs []*pb.ChangeRecord
	for i := range n {
		recs = append(recs, &pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_ADD, Object: []byte("{}"),
			Ref: &pb.ObjectRef{Version: "v1", Kind: "Service", Namespace: "ns", Name: fmt.Sprintf("svc-%d", i)}})
	}
	proxy.Hold(true) // the server's acks (and nothing else) come back held
	release := time.AfterFunc(time.Second, func() { proxy.Hold(false) })
	defer release.Stop()
	natstest.PublishRecords(t, js, names, recs)

	msgs := natstest.ReadStream(t, js, names.ChangesStream())
	if len(msgs) != n {
		t.Fatalf("stream holds %d records, want %d", len(msgs), n)
	}
	for i, m := range msgs {
		var got pb.ChangeRecord
		if err := proto.Unmarshal(m.Data, &got); err != nil {
			t.Fatal(err)
		}
		if got.GetRef().GetName() != recs[i].GetRef().GetName() {
			t.Errorf("record %d is %s, want %s", i, got.GetRef().GetName(), recs[i].GetRef().GetName())
		}
	}
}
