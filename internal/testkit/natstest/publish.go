package natstest

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// PublishRecords publishes recs on their change subjects, asynchronously,
// and waits until the stream has acknowledged every one of them.
func PublishRecords(t testing.TB, js jetstream.JetStream, names bus.Names, recs []*pb.ChangeRecord) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	acks := make([]jetstream.PubAckFuture, 0, len(recs))
	for _, r := range recs {
		data, err := proto.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		a, err := js.PublishAsync(names.ChangeSubject(r.GetCluster(), r.GetRef()), data)
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, a)
	}
	for _, a := range acks {
		select {
		case <-a.Ok():
		case err := <-a.Err():
			t.Fatal(err)
		case <-ctx.Done():
			t.Fatalf("acks of %d records: %v", len(recs), ctx.Err())
		}
	}
}
