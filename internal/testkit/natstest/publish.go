package natstest

import (
	"context"
	"errors"
	"testing"
	"time"

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
		acks = append(acks, PublishAsync(t, js, names.ChangeSubject(r.GetCluster(), r.GetRef()), data))
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

// PublishAsync publishes data on subject asynchronously. When as many
// publishes as the JetStream context allows await their acks for longer
// than nats.go waits for a free slot (a slow or busy server), it waits for
// them, within testutil.DefaultTimeout, then publishes data, which nats.go
// did not send.
func PublishAsync(t testing.TB, js jetstream.JetStream, subject string, data []byte) jetstream.PubAckFuture {
	t.Helper()
	for {
		a, err := js.PublishAsync(subject, data)
		if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(testutil.DefaultTimeout):
				t.Fatalf("publish to %s: %d publishes still await their acks after %v", subject, js.PublishAsyncPending(), testutil.DefaultTimeout)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
}
