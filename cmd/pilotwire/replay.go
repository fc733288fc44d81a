package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/model"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// replayed is the model as it stood at a point of the history.
type replayed struct {
	Mesh *model.Mesh
	// Seq is the last change applied, Time when it was stored.
	Seq  uint64
	Time time.Time
	// Bad counts records the model could not apply (a frontend logs and
	// counts the same ones in pilotwire_ads_bad_records_total).
	Bad int
}

// replayModel builds the model from the change stream up to at: every
// record through at.Seq, or stored at or before at.Time, or (at zero) the
// whole stream as it stands. It applies the same records, in the same
// order, to the same pkg/model code as a frontend; a frontend that
// bootstrapped from the last record of each subject holds the same objects.
func replayModel(ctx context.Context, s *session, at point) (*replayed, error) {
	stream, err := s.js.Stream(ctx, s.names.ChangesStream())
	if err != nil {
		return nil, fmt.Errorf("changes stream: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("changes stream info: %w", err)
	}
	st := info.State
	if st.FirstSeq > 1 && at.Seq != 0 && at.Seq < st.FirstSeq {
		return nil, fmt.Errorf("%s is older than the change stream keeps: its first record is %d (records before it were removed by retention)", at, st.FirstSeq)
	}
	if st.FirstSeq > 1 && !at.Time.IsZero() && at.Time.Before(st.FirstTime) {
		return nil, fmt.Errorf("%s is older than the change stream keeps: its first record was stored at %s", at, st.FirstTime.Format(time.RFC3339Nano))
	}
	if at.Seq > st.LastSeq {
		return nil, fmt.Errorf("%s is past the change stream's last record (%d)", at, st.LastSeq)
	}
	store := model.NewStore()
	r := &replayed{}
	err = scanStream(ctx, stream, scanOptions{ThroughSeq: at.Seq, Until: at.Time}, func(msg jetstream.Msg, md *jetstream.MsgMetadata) error {
		r.Seq, r.Time = md.Sequence.Stream, md.Timestamp
		rec := &pb.ChangeRecord{}
		if err := proto.Unmarshal(msg.Data(), rec); err != nil {
			r.Bad++
			return nil
		}
		if err := store.Apply(rec, md.Sequence.Stream); err != nil && !errors.Is(err, model.ErrAlreadyApplied) {
			r.Bad++
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("replay changes: %w", err)
	}
	if r.Seq == 0 && !at.Time.IsZero() {
		return nil, fmt.Errorf("no change was stored at or before %s", at)
	}
	r.Mesh = store.Snapshot()
	return r, nil
}
