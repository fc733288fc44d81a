package publish

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pilotwire/pilotwire/pkg/snapshot"
)

// Reasons a snapshot is not used at start (label values of
// pilotwire_ingest_snapshot_unusable_total).
const (
	// snapshotUnreadable: the bucket could not be listed or the snapshot
	// read (corrupt, denied, removed while read, timed out).
	snapshotUnreadable = "unreadable"
	// snapshotAhead: the snapshot's sequence is past the stream's last
	// one (the stream was re-created under the bucket).
	snapshotAhead = "ahead"
	// snapshotGap: the stream lost records after the snapshot (hard
	// limits), so the records after it cannot be read.
	snapshotGap = "gap"
)

// Bounds of the start from a snapshot; past one the publisher reads the
// change stream instead. A request the server denies (a user without
// access to the snapshot bucket) is never answered, so finding the
// snapshot has a short bound, reading it a longer one.
const (
	findSnapshotTimeout = 10 * time.Second
	readSnapshotTimeout = time.Minute
)

// errUnusable is a snapshot that is readable but cannot stand for the
// stream; reason is its label.
type errUnusable struct {
	reason string
	msg    string
}

func (e *errUnusable) Error() string { return e.msg }

// fromSnapshot fills the state from the newest snapshot of the change
// stream: for each of the cluster's subjects it held, its last record at
// the snapshot's sequence (a live one with what absorb reads, a delete as
// a tombstone). It returns the snapshot, or nil when there is none; the
// caller then reads the records after it. first and last are the
// stream's first and last sequence as read before (last is read again if
// the snapshot is past it).
//
// What the snapshot holds that the stream no longer does is left out:
// an entry below the stream's first sequence (gone to a hard limit or a
// purge), and a tombstone at or below the compaction horizon (compaction
// purges those subjects, possibly after the snapshot was written). Such
// a subject then reads as empty, as the stream has it. Were one still
// there, the first publish on it expects sequence 0, is refused, and
// resolveConflict reads the subject's last record: a conflict, never a
// lost or duplicated record.
func (p *Publisher) fromSnapshot(ctx context.Context, s jetstream.Stream, first, last uint64) (*snapshot.Info, error) {
	fctx, cancel := context.WithTimeout(ctx, findSnapshotTimeout)
	defer cancel()
	st, err := snapshot.Open(fctx, p.js, p.opts.Names)
	if err != nil || st == nil {
		return nil, err
	}
	in, err := st.Latest(fctx, 0, time.Time{})
	if err != nil || in == nil {
		return nil, err
	}
	if in.Seq > last {
		// Written after the stream's info was read, or from another stream.
		info, err := s.Info(fctx)
		if err != nil {
			return nil, fmt.Errorf("changes stream info: %w", err)
		}
		last = info.State.LastSeq
	}
	switch {
	case in.Seq > last:
		return nil, &errUnusable{snapshotAhead, fmt.Sprintf("snapshot at seq %d is past the change stream's last seq %d", in.Seq, last)}
	case first > in.Seq+1:
		return nil, &errUnusable{snapshotGap, fmt.Sprintf("the change stream lost records after the snapshot at seq %d (its first seq is %d)", in.Seq, first)}
	}
	horizon, err := st.Horizon(fctx)
	if err != nil {
		return nil, err
	}
	ctx, cancelRead := context.WithTimeout(ctx, readSnapshotTimeout)
	defer cancelRead()
	// Sized for every subject of the snapshot: growing a map of 100,000s
	// of keys was a fifth of the start.
	p.state = make(map[Key]*entry, max(in.Subjects, in.Objects))
	prefix := strings.TrimSuffix(p.opts.Names.ChangesCluster(p.opts.Cluster), ">")
	err = st.ReadSubjects(ctx, *in, prefix, func(r snapshot.Record, deleted bool) error {
		switch {
		case r.Seq < first:
		case deleted && r.Seq <= horizon:
		case deleted:
			if k, ok := p.keyOf(r.Subject); ok && !p.recorded(k) {
				p.markUnrecorded(r.Subject, k) // Start purges it, as from the stream
			} else if ok {
				p.setEntry(k, entry{seq: r.Seq})
			}
		default:
			p.absorb(r.Subject, r.Data, r.Content, r.Seq)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return in, nil
}

// startState reads the cluster's current objects: from the newest snapshot
// and the records after it, or, without a usable one, the last record of
// every subject. It returns the snapshot's sequence (0: none used).
// Caller holds mu.
func (p *Publisher) startState(ctx context.Context, s jetstream.Stream) (uint64, error) {
	info, err := s.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("read current objects: stream info: %w", err)
	}
	var from uint64
	if !p.opts.IgnoreSnapshots {
		in, err := p.fromSnapshot(ctx, s, info.State.FirstSeq, info.State.LastSeq)
		if err != nil {
			if ctx.Err() != nil {
				return 0, err
			}
			reason := snapshotUnreadable
			var u *errUnusable
			if errors.As(err, &u) {
				reason = u.reason
			}
			p.metrics.snapshotUnusable.WithLabelValues(reason).Inc()
			p.log.Error("snapshot not usable; reading the change stream instead", "reason", reason, "err", err)
			p.state, p.live, p.lastSeq, p.unrecorded = make(map[Key]*entry), 0, 0, nil
		}
		if in != nil && err == nil {
			from = in.Seq
		}
	}
	p.metrics.snapshotSeq.Set(float64(from))
	return from, p.load(ctx, s, from)
}
