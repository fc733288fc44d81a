package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// delivery is one DeliveryRecord with where the stream stored it: the
// sequence and time of its message (a batch holds many records).
type delivery struct {
	Seq    uint64
	Stored time.Time
	Rec    *pb.DeliveryRecord
}

// readDeliveries returns the records of the DELIVERIES stream on the
// subjects (none: all), oldest first. Undecodable messages are skipped and
// counted in a warning on stderr.
func readDeliveries(ctx context.Context, s *session, subjects []string) ([]delivery, error) {
	stream, err := s.js.Stream(ctx, s.names.DeliveriesStream())
	if err != nil {
		return nil, fmt.Errorf("deliveries stream (are frontends recording deliveries?): %w", err)
	}
	var out []delivery
	bad := 0
	var firstBad error
	err = scanStream(ctx, stream, scanOptions{Filter: subjects}, func(msg jetstream.Msg, md *jetstream.MsgMetadata) error {
		recs, err := bus.DecodeDeliveries(s.names, msg.Subject(), msg.Data())
		if err != nil {
			if bad++; firstBad == nil {
				firstBad = fmt.Errorf("message %d: %w", md.Sequence.Stream, err)
			}
			return nil
		}
		for _, rec := range recs {
			out = append(out, delivery{Seq: md.Sequence.Stream, Stored: md.Timestamp, Rec: rec})
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read deliveries: %w", err)
	}
	if bad > 0 {
		fmt.Fprintf(os.Stderr, "warning: %d undecodable messages in %s skipped (first: %v)\n", bad, s.names.DeliveriesStream(), firstBad)
	}
	return out, nil
}

// kindName is a delivery kind as printed: RESPONSE, ACK, NACK.
func kindName(k pb.DeliveryRecord_Kind) string { return k.String() }
