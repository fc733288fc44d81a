package snapshot

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pilotwire/pilotwire/pkg/bus"
)

// Info describes one stored snapshot.
type Info struct {
	Name string
	// Seq is the last change-stream sequence the snapshot reflects; Time
	// when the stream stored that record.
	Seq  uint64
	Time time.Time
	// Objects is the number of live records it holds.
	Objects int
	// Subjects is the number of entries, live and deleted (0: unknown,
	// a snapshot written before it was recorded).
	Subjects int
	// Size is its encoded size in bytes.
	Size uint64
}

// namePrefix names snapshot objects: changes-<seq, 20 digits>, so that
// names sort by sequence.
const namePrefix = "changes-"

// viewPrefix names a snapshot's view (see magicView): view-<the same 20
// digits>. A snapshot may have none (written before views, or its view's
// write failed); readers then read the snapshot itself.
const viewPrefix = "view-"

// ErrNoView is returned by ReadView for a snapshot without a view.
var ErrNoView = errors.New("snapshot has no view")

func viewName(in Info) string { return viewPrefix + strings.TrimPrefix(in.Name, namePrefix) }

// horizonName is the object holding the horizon: the sequence of the
// oldest snapshot kept once compaction has purged anything. Points of the
// history before it cannot be rebuilt exactly.
const horizonName = "horizon"

// Store is the snapshot bucket.
type Store struct {
	os     jetstream.ObjectStore
	js     jetstream.JetStream
	bucket string
}

// Ensure creates or opens the snapshot bucket.
func Ensure(ctx context.Context, js jetstream.JetStream, names bus.Names, o bus.StreamOptions) (*Store, error) {
	os, err := bus.EnsureObjectStore(ctx, js, names.SnapshotsConfig(o))
	if err != nil {
		return nil, err
	}
	return &Store{os: os, js: js, bucket: names.SnapshotBucket()}, nil
}

// Open opens the snapshot bucket; nil (and no error) when there is none.
func Open(ctx context.Context, js jetstream.JetStream, names bus.Names) (*Store, error) {
	os, err := js.ObjectStore(ctx, names.SnapshotBucket())
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot bucket: %w", err)
	}
	return &Store{os: os, js: js, bucket: names.SnapshotBucket()}, nil
}

// listTimeout bounds one listing of the bucket's objects.
const listTimeout = 30 * time.Second

// List returns the stored snapshots, oldest first.
func (s *Store) List(ctx context.Context) ([]Info, error) {
	out, _, err := s.list(ctx)
	return out, err
}

// list returns the stored snapshots, oldest first, and the names of the
// stored views.
func (s *Store) list(ctx context.Context) ([]Info, []string, error) {
	// nats.go's List ends an empty listing only when the bucket's
	// last-message lookup answers "not found"; any other answer (no
	// responders on a bucket whose replicas are still starting, a denied
	// direct get) leaves it waiting for a message that never comes. So an
	// empty bucket is recognised from the stream's own count of object
	// descriptions first, and a listing is bounded.
	n, err := s.descriptions(ctx)
	if err != nil {
		return nil, nil, err
	}
	if n == 0 {
		return nil, nil, nil
	}
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	defer cancel()
	objs, err := s.os.List(lctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list snapshots: %w", err)
	}
	var out []Info
	var views []string
	for _, o := range objs {
		if !o.Deleted && strings.HasPrefix(o.Name, viewPrefix) {
			views = append(views, o.Name)
		}
		if o.Deleted || !strings.HasPrefix(o.Name, namePrefix) {
			continue
		}
		seq, err := strconv.ParseUint(o.Metadata["seq"], 10, 64)
		if err != nil {
			continue // not one of ours
		}
		at, _ := time.Parse(time.RFC3339Nano, o.Metadata["time"])
		n, _ := strconv.Atoi(o.Metadata["objects"])
		subjects, _ := strconv.Atoi(o.Metadata["subjects"])
		out = append(out, Info{Name: o.Name, Seq: seq, Time: at, Objects: n, Subjects: subjects, Size: o.Size})
	}
	slices.SortFunc(out, func(a, b Info) int { return compareSeq(a.Seq, b.Seq) })
	return out, views, nil
}

// descriptions counts the object descriptions (one per live or deleted
// object name) the bucket's stream holds.
func (s *Store) descriptions(ctx context.Context) (int, error) {
	stream, err := s.js.Stream(ctx, "OBJ_"+s.bucket)
	if err != nil {
		return 0, fmt.Errorf("snapshot bucket stream: %w", err)
	}
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter("$O."+s.bucket+".M.>"))
	if err != nil {
		return 0, fmt.Errorf("snapshot bucket info: %w", err)
	}
	return len(info.State.Subjects), nil
}

// Latest returns the newest snapshot with Seq at most maxSeq (0: any) and
// Time not after until (zero: any), or nil.
func (s *Store) Latest(ctx context.Context, maxSeq uint64, until time.Time) (*Info, error) {
	all, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	for i := len(all) - 1; i >= 0; i-- {
		in := all[i]
		if (maxSeq == 0 || in.Seq <= maxSeq) && (until.IsZero() || !in.Time.After(until)) {
			return &in, nil
		}
	}
	return nil, nil
}

// Read calls fn for every live record of a snapshot, in sequence order.
func (s *Store) Read(ctx context.Context, in Info, fn func(Record) error) error {
	return s.read(ctx, in, func(r Record, flags byte) error {
		if flags&flagDeleted != 0 {
			return nil
		}
		return fn(r)
	})
}

// ReadSubjects calls fn for every entry of a snapshot whose subject starts
// with prefix ("": all), in sequence order: each live record, and each
// subject whose last record at the snapshot's sequence was a delete
// (deleted true; Record.Data nil, Seq the delete's). A subject the
// snapshot lacks had no record on the stream as of the snapshot (or was
// purged by compaction before it was written).
func (s *Store) ReadSubjects(ctx context.Context, in Info, prefix string, fn func(r Record, deleted bool) error) error {
	return s.read(ctx, in, func(r Record, flags byte) error {
		if !strings.HasPrefix(r.Subject, prefix) {
			return nil
		}
		return fn(r, flags&flagDeleted != 0)
	})
}

// ReadView calls fn for every record of a snapshot's view, in sequence
// order: the same live records as Read, but a record with a compact form
// comes with Record.Model and no Data. It returns ErrNoView when the
// snapshot has no view. A reader that cannot use a Model form must read
// the snapshot itself (Read), which has the record beside it.
//
// Before the first record, head (if not nil) gets the view's count of
// live records per kind token (bus.Names.ChangeKind), nil when the view
// has none: a reader can size its indexes once instead of growing them.
func (s *Store) ReadView(ctx context.Context, in Info, head func(kinds map[string]int), fn func(Record) error) error {
	r, err := s.os.Get(ctx, viewName(in))
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return ErrNoView
	}
	if err != nil {
		return fmt.Errorf("get snapshot view %s: %w", viewName(in), err)
	}
	defer r.Close()
	if head != nil {
		var kinds map[string]int
		if oi, err := r.Info(); err == nil && oi.Metadata["kinds"] != "" {
			if json.Unmarshal([]byte(oi.Metadata["kinds"]), &kinds) != nil {
				kinds = nil // only a hint
			}
		}
		head(kinds)
	}
	if err := decode(r, func(r Record, _ byte) error { return fn(r) }); err != nil {
		return fmt.Errorf("read snapshot view %s: %w", viewName(in), err)
	}
	return nil
}

func (s *Store) read(ctx context.Context, in Info, fn func(Record, byte) error) error {
	r, err := s.os.Get(ctx, in.Name)
	if err != nil {
		return fmt.Errorf("get snapshot %s: %w", in.Name, err)
	}
	defer r.Close()
	if err := decode(r, fn); err != nil {
		return fmt.Errorf("read snapshot %s: %w", in.Name, err)
	}
	return nil
}

// loadSet reads a snapshot back into a set standing at its sequence.
func (s *Store) loadSet(ctx context.Context, in Info) (*Set, error) {
	set := NewSet()
	if err := s.read(ctx, in, func(r Record, flags byte) error { set.load(r, flags); return nil }); err != nil {
		return nil, err
	}
	set.setAt(in.Seq, in.Time)
	return set, nil
}

// Write stores the set's live records as the snapshot at the set's
// sequence. The object becomes visible only once complete.
func (s *Store) Write(ctx context.Context, set *Set) (Info, error) {
	entries := set.entries()
	in := Info{Name: fmt.Sprintf("%s%020d", namePrefix, set.Seq()), Seq: set.Seq(), Time: set.Time(), Objects: set.Len(), Subjects: len(entries)}
	size, err := s.put(ctx, in, in.Name, "pilotwire change-stream snapshot", entries, false, nil)
	if err != nil {
		return Info{}, fmt.Errorf("write snapshot %s: %w", in.Name, err)
	}
	in.Size = size
	return in, nil
}

// WriteView stores the view of the snapshot in (written by Write from
// the same set, unchanged since) and returns its size. Write it after
// the snapshot: a reader that finds the snapshot before its view reads
// the snapshot itself.
//
// kinds is the count of live records per kind token, kept in the view's
// metadata for ReadView's head.
func (s *Store) WriteView(ctx context.Context, set *Set, in Info, kinds map[string]int) (uint64, error) {
	if set.Seq() != in.Seq {
		return 0, fmt.Errorf("view of snapshot %s: the set is at seq %d", in.Name, set.Seq())
	}
	var extra map[string]string
	if len(kinds) > 0 {
		b, err := json.Marshal(kinds)
		if err != nil {
			return 0, fmt.Errorf("view of snapshot %s: %w", in.Name, err)
		}
		extra = map[string]string{"kinds": string(b)}
	}
	size, err := s.put(ctx, in, viewName(in), "pilotwire change-stream snapshot view (compact forms, for frontends)", set.entries(), true, extra)
	if err != nil {
		return 0, fmt.Errorf("write snapshot view %s: %w", viewName(in), err)
	}
	return size, nil
}

// put encodes entries into the object name, described by in's metadata.
// The object becomes visible only once complete.
func (s *Store) put(ctx context.Context, in Info, name, desc string, entries []entry, view bool, extra map[string]string) (uint64, error) {
	pr, pw := io.Pipe()
	encoded := make(chan struct{})
	go func() { defer close(encoded); pw.CloseWithError(encode(pw, entries, view, false)) }()
	defer func() { <-encoded }()
	meta := map[string]string{
		"seq":      strconv.FormatUint(in.Seq, 10),
		"time":     in.Time.UTC().Format(time.RFC3339Nano),
		"objects":  strconv.Itoa(in.Objects),
		"subjects": strconv.Itoa(in.Subjects),
	}
	maps.Copy(meta, extra)
	oi, err := s.os.Put(ctx, jetstream.ObjectMeta{Name: name, Description: desc, Metadata: meta}, pr)
	pr.CloseWithError(errors.New("put ended")) // lets the encoder return if Put stopped early
	if err != nil {
		return 0, err
	}
	return oi.Size, nil
}

// Delete removes a snapshot and its view. The view goes first: a
// snapshot left without one is still read whole.
func (s *Store) Delete(ctx context.Context, in Info) error {
	if err := s.deleteObject(ctx, viewName(in)); err != nil {
		return err
	}
	return s.deleteObject(ctx, in.Name)
}

func (s *Store) deleteObject(ctx context.Context, name string) error {
	if err := s.os.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("delete snapshot object %s: %w", name, err)
	}
	return nil
}

// Horizon is the oldest sequence the history can be rebuilt at exactly
// (0: every point the stream holds): compaction has purged records below
// it.
func (s *Store) Horizon(ctx context.Context) (uint64, error) {
	b, err := s.os.GetBytes(ctx, horizonName)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read the snapshot horizon: %w", err)
	}
	seq, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("snapshot horizon %q: %w", b, err)
	}
	return seq, nil
}

// setHorizon records the horizon; it only grows.
func (s *Store) setHorizon(ctx context.Context, seq uint64) error {
	if _, err := s.os.PutBytes(ctx, horizonName, []byte(strconv.FormatUint(seq, 10))); err != nil {
		return fmt.Errorf("write the snapshot horizon: %w", err)
	}
	return nil
}

// LoadLatest reads the newest snapshot at or before (maxSeq, until) (see
// Latest) of the bucket, if there is one, into fn. It returns the
// snapshot read, or nil when there is none (no bucket, no snapshot).
func LoadLatest(ctx context.Context, js jetstream.JetStream, names bus.Names, maxSeq uint64, until time.Time, fn func(Record) error) (*Info, error) {
	st, err := Open(ctx, js, names)
	if err != nil || st == nil {
		return nil, err
	}
	in, err := st.Latest(ctx, maxSeq, until)
	if err != nil || in == nil {
		return nil, err
	}
	if err := st.Read(ctx, *in, fn); err != nil {
		return nil, err
	}
	return in, nil
}
