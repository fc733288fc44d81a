package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
	"github.com/pilotwire/pilotwire/pkg/model"
	"github.com/pilotwire/pilotwire/pkg/snapshot"
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
	// Snapshot is the sequence of the snapshot it started from (0: none).
	Snapshot uint64
}

// replayModel builds the model from the change stream up to at: every
// record through at.Seq, or stored at or before at.Time, or (at zero) the
// whole stream as it stands. It starts from the newest snapshot at or
// before at, if there is one, and replays only what follows it; without
// one, from the stream's first record. It applies the same records, in the
// same order, to the same pkg/model code as a frontend, which starts from
// the same snapshots, so the two hold the same objects. mc is the
// frontends' mesh config (nil: Istio's defaults, as theirs).
func replayModel(ctx context.Context, s *session, at point, mc *meshconfig.MeshConfig) (*replayed, error) {
	stream, err := s.js.Stream(ctx, s.names.ChangesStream())
	if err != nil {
		return nil, fmt.Errorf("changes stream: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("changes stream info: %w", err)
	}
	st := info.State
	if at.Seq > st.LastSeq {
		return nil, fmt.Errorf("%s is past the change stream's last record (%d)", at, st.LastSeq)
	}
	// The frontends' mesh config shapes the model (exportTo defaults, the
	// root namespace, default traffic policy), not only the generators.
	store := model.NewStore(model.WithMeshConfig(mc))
	r := &replayed{}
	var applyRecord func(seq uint64, stored time.Time, data []byte)
	apply := func(rec snapshot.Record) { applyRecord(rec.Seq, rec.Time, rec.Data) }
	applyRecord = func(seq uint64, stored time.Time, data []byte) {
		r.Seq, r.Time = seq, stored
		rec := &pb.ChangeRecord{}
		if err := proto.Unmarshal(data, rec); err != nil {
			r.Bad++
			return
		}
		if err := store.Apply(rec, seq); err != nil && !errors.Is(err, model.ErrAlreadyApplied) {
			r.Bad++
		}
	}
	snap, err := loadSnapshot(ctx, s, at, st, apply)
	if err != nil {
		return nil, err
	}
	opts := scanOptions{ThroughSeq: at.Seq, Until: at.Time}
	if snap != nil {
		r.Seq, r.Time, r.Snapshot = snap.Seq, snap.Time, snap.Seq
		opts.FromSeq = snap.Seq + 1
	}
	if snap == nil || at.Seq == 0 || at.Seq > snap.Seq {
		err = scanStream(ctx, stream, opts, func(msg jetstream.Msg, md *jetstream.MsgMetadata) error {
			applyRecord(md.Sequence.Stream, md.Timestamp, msg.Data())
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("replay changes: %w", err)
		}
	}
	if r.Seq == 0 && !at.Time.IsZero() {
		return nil, fmt.Errorf("no change was stored at or before %s", at)
	}
	r.Mesh = store.Snapshot()
	return r, nil
}

// loadSnapshot applies the newest snapshot at or before at, if any, and
// returns it. A point no snapshot covers must be on the stream in full:
// not older than the snapshot horizon (compaction purged records before
// it) nor than the stream's first record (hard limits removed them).
func loadSnapshot(ctx context.Context, s *session, at point, st jetstream.StreamState, apply func(snapshot.Record)) (*snapshot.Info, error) {
	store, err := snapshot.Open(ctx, s.js, s.names)
	if err != nil {
		return nil, err
	}
	var horizon uint64
	if store != nil {
		if horizon, err = store.Horizon(ctx); err != nil {
			return nil, err
		}
		in, err := store.Latest(ctx, at.Seq, at.Time)
		if err != nil {
			return nil, err
		}
		if in != nil && st.FirstSeq <= in.Seq+1 {
			err := store.Read(ctx, *in, func(rec snapshot.Record) error {
				apply(rec)
				return nil
			})
			if err != nil {
				return nil, err
			}
			return in, nil
		}
	}
	if horizon > 0 {
		return nil, fmt.Errorf("%s is older than the history keeps (older than the retention window and than the oldest snapshot): points from seq %d on can be rebuilt; records before it that no live object needs were purged", at, horizon)
	}
	if st.FirstSeq > 1 && at.Seq != 0 && at.Seq < st.FirstSeq {
		return nil, fmt.Errorf("%s is older than the change stream keeps: its first record is %d (records before it were removed by retention)", at, st.FirstSeq)
	}
	if st.FirstSeq > 1 && !at.Time.IsZero() && at.Time.Before(st.FirstTime) {
		return nil, fmt.Errorf("%s is older than the change stream keeps: its first record was stored at %s", at, st.FirstTime.Format(time.RFC3339Nano))
	}
	return nil, nil
}
