package main

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// delivery is one DeliveryRecord with where the stream stored it.
type delivery struct {
	Seq    uint64
	Stored time.Time
	Rec    *pb.DeliveryRecord
}

// readDeliveries returns the records of the DELIVERIES stream on the
// subjects (none: all), oldest first. Undecodable records are skipped.
func readDeliveries(ctx context.Context, s *session, subjects []string) ([]delivery, error) {
	stream, err := s.js.Stream(ctx, s.names.DeliveriesStream())
	if err != nil {
		return nil, fmt.Errorf("deliveries stream (are frontends recording deliveries?): %w", err)
	}
	var out []delivery
	err = scanStream(ctx, stream, scanOptions{Filter: subjects}, func(msg jetstream.Msg, md *jetstream.MsgMetadata) error {
		rec := &pb.DeliveryRecord{}
		if proto.Unmarshal(msg.Data(), rec) == nil {
			out = append(out, delivery{Seq: md.Sequence.Stream, Stored: md.Timestamp, Rec: rec})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read deliveries: %w", err)
	}
	return out, nil
}

// kindName is a delivery kind as printed: RESPONSE, ACK, NACK.
func kindName(k pb.DeliveryRecord_Kind) string { return k.String() }
