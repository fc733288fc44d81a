package publish_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/snapshot"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

// restart starts a publisher on e's stream with its own registry, as a
// restarted ingest does; opts may adjust its options.
func (e *env) restart(t *testing.T, opts ...func(*publish.Options)) (*publish.Publisher, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	return e.start(t, append([]func(*publish.Options){func(o *publish.Options) { o.Registerer = reg }}, opts...)...), reg
}

func ignoreSnapshots(o *publish.Options) { o.IgnoreSnapshots = true }

// TestStartFromSnapshot: a publisher that starts from the newest snapshot
// and the records after it knows every subject of its cluster as one that
// reads the whole stream does (same sequences, uids, versions: the same
// fencing), and the Sync after its restart publishes exactly the
// difference: the deletes of objects that went while it was down (one
// live in the snapshot, one re-created after it), the new object, and
// nothing for what is unchanged.
func TestStartFromSnapshot(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	p := e.start(t)
	other := e.start(t, func(o *publish.Options) { o.Cluster, o.Registerer = "other", nil })
	a1, a2 := obj("Service", "default", "a", "1"), obj("Service", "default", "a", "2")
	b1, b2 := obj("Service", "default", "b", "1"), obj("Service", "default", "b", "2")
	c, d, ee, f := obj("ConfigMap", "x", "c", "1"), obj("Service", "y", "d", "1"), obj("Service", "y", "e.e", "1"), obj("Namespace", "", "f", "1")
	if _, err := p.Sync(ctx, []publish.Object{a1, b1, c, d}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Apply(ctx, publish.Upsert(a2), publish.Delete(d)); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Sync(ctx, []publish.Object{obj("Service", "default", "a", "other")}); err != nil {
		t.Fatal(err)
	}
	snap := snapshot.New(snapshot.Options{JS: e.js, Names: names})
	defer snap.Close()
	in, err := snap.Step(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// After the snapshot: b changes, c goes, e comes, d is back.
	if _, err := p.Apply(ctx, publish.Upsert(b2), publish.Delete(c), publish.Upsert(ee), publish.Upsert(d)); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Apply(ctx, publish.Upsert(obj("Service", "default", "z", "other"))); err != nil {
		t.Fatal(err)
	}

	fromSnap, reg := e.restart(t)
	fromStream, _ := e.restart(t, ignoreSnapshots)
	if got := metric(t, reg, "pilotwire_ingest_start_snapshot_seq", nil); got != float64(in.Seq) {
		t.Fatalf("started from snapshot %v, want the one at %d", got, in.Seq)
	}
	if diff := cmp.Diff(fromStream.Subjects(), fromSnap.Subjects()); diff != "" {
		t.Fatalf("subjects (-from the stream +from the snapshot):\n%s", diff)
	}
	if n := len(fromSnap.Subjects()); n != 5 {
		t.Fatalf("%d subjects known, want a..e of cluster %s: %v", n, cluster, fromSnap.Subjects())
	}

	before := len(e.records(t))
	res, err := fromSnap.Sync(ctx, []publish.Object{b2, ee, f})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(publish.Result{Published: 3, Unchanged: 2}, res); diff != "" {
		t.Errorf("sync after the restart (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"OP_ADD Namespace /f", "OP_DELETE Service default/a", "OP_DELETE Service y/d"}, summary(e.records(t)[before:])); diff != "" {
		t.Errorf("records of the sync (-want +got):\n%s", diff)
	}
	if got := metric(t, reg, "pilotwire_ingest_publish_conflicts_total", nil); got != 0 {
		t.Errorf("%v conflicts, want 0", got)
	}
}

// TestStartFromCompactedSnapshot: once compaction has purged a deleted
// object's subject, the newest snapshot still lists its delete (it was
// written before the purge). A publisher started from it must treat the
// subject as the stream has it, empty: the object re-created is published
// once, as the first record of its subject, with the uid and message id
// an ingest reading the stream gives it, and without a conflict.
func TestStartFromCompactedSnapshot(t *testing.T) {
	e := newEnv(t)
	ctx := testCtx(t)
	now := time.Now()
	snap := snapshot.New(snapshot.Options{JS: e.js, Names: names, Retention: time.Hour, Now: func() time.Time { return now }})
	defer snap.Close()
	p := e.start(t)
	keep, gone := obj("Service", "default", "keep", "1"), obj("Service", "default", "gone", "1")
	if _, err := p.Sync(ctx, []publish.Object{keep, gone}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Apply(ctx, publish.Delete(gone)); err != nil {
		t.Fatal(err)
	}
	if _, err := snap.Step(ctx); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Hour)
	if _, err := snap.Step(ctx); err != nil { // past the window: purges gone's subject
		t.Fatal(err)
	}
	subj := names.ChangeSubject(cluster, &pb.ObjectRef{Version: "v1", Kind: "Service", Namespace: "default", Name: "gone"})
	if msg, err := bus.LastMsg(ctx, streamOf(t, e), subj); err != nil || msg != nil {
		t.Fatalf("compaction left %s: %v, %v", subj, msg, err)
	}

	fromSnap, reg := e.restart(t)
	fromStream, _ := e.restart(t, ignoreSnapshots)
	if got := metric(t, reg, "pilotwire_ingest_start_snapshot_seq", nil); got == 0 {
		t.Fatal("did not start from the snapshot")
	}
	if diff := cmp.Diff(fromStream.Subjects(), fromSnap.Subjects()); diff != "" {
		t.Fatalf("subjects (-from the stream +from the snapshot):\n%s", diff)
	}
	before := len(e.records(t))
	// Changed content: the same one would repeat the first add's message
	// id, which the dedup window of this quick test still holds.
	again := obj("Service", "default", "gone", "2")
	res, err := fromSnap.Sync(ctx, []publish.Object{keep, again})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(publish.Result{Published: 1, Unchanged: 1}, res); diff != "" {
		t.Errorf("sync (-want +got):\n%s", diff)
	}
	recs := e.records(t)[before:]
	if len(recs) != 1 {
		t.Fatalf("%d records, want gone's add", len(recs))
	}
	uid := publish.SynthUID(cluster, gone.Key, 0)
	if got := recs[0].rec.GetUid(); got != uid {
		t.Errorf("uid %q, want %q (the subject's first record)", got, uid)
	}
	if want := publish.MsgID(cluster, uid, recs[0].rec.GetResourceVersion(), pb.Op_OP_ADD, 0); recs[0].msgID != want {
		t.Errorf("msg id %q, want %q", recs[0].msgID, want)
	}
	if got := metric(t, reg, "pilotwire_ingest_publish_conflicts_total", nil); got != 0 {
		t.Errorf("%v conflicts, want 0: the purged subject was expected at its old delete", got)
	}
}

func streamOf(t *testing.T, e *env) jetstream.Stream {
	t.Helper()
	s, err := e.js.Stream(testCtx(t), names.ChangesStream())
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestStartWithoutAUsableSnapshot: a snapshot that cannot stand for the
// stream is logged and counted by reason, and the publisher reads the
// stream instead, knowing what one that ignores snapshots knows.
func TestStartWithoutAUsableSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name   string
		reason string
		// spoil makes the snapshot at seq unusable.
		spoil func(t *testing.T, e *env, os jetstream.ObjectStore, seq uint64)
	}{
		{name: "corrupt", reason: "unreadable", spoil: func(t *testing.T, e *env, os jetstream.ObjectStore, seq uint64) {
			putSnapshot(t, os, seq+1, "not a snapshot")
			publishOne(t, e, "after", "1") // the stream reaches the corrupt one's seq
		}},
		{name: "ahead of the stream", reason: "ahead", spoil: func(t *testing.T, e *env, os jetstream.ObjectStore, seq uint64) {
			putSnapshot(t, os, seq+100, "PWSNAP1\n")
		}},
		{name: "records lost after it", reason: "gap", spoil: func(t *testing.T, e *env, _ jetstream.ObjectStore, seq uint64) {
			publishOne(t, e, "after", "1")
			publishOne(t, e, "after", "2")
			// A hard limit drops every record up to the last one.
			if err := streamOf(t, e).Purge(testCtx(t), jetstream.WithPurgeSequence(seq+2)); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			ctx := testCtx(t)
			p := e.start(t)
			if _, err := p.Sync(ctx, []publish.Object{obj("Service", "default", "a", "1"), obj("Service", "default", "b", "1")}); err != nil {
				t.Fatal(err)
			}
			snap := snapshot.New(snapshot.Options{JS: e.js, Names: names})
			defer snap.Close()
			in, err := snap.Step(ctx)
			if err != nil {
				t.Fatal(err)
			}
			os, err := e.js.ObjectStore(ctx, names.SnapshotBucket())
			if err != nil {
				t.Fatal(err)
			}
			tc.spoil(t, e, os, in.Seq)

			got, reg := e.restart(t)
			want, _ := e.restart(t, ignoreSnapshots)
			if diff := cmp.Diff(want.Subjects(), got.Subjects()); diff != "" {
				t.Fatalf("subjects (-from the stream +after the unusable snapshot):\n%s", diff)
			}
			if n := metric(t, reg, "pilotwire_ingest_snapshot_unusable_total", map[string]string{"reason": tc.reason}); n != 1 {
				t.Errorf("snapshot_unusable_total{reason=%s} = %v, want 1", tc.reason, n)
			}
			if got := metric(t, reg, "pilotwire_ingest_start_snapshot_seq", nil); got != 0 {
				t.Errorf("start_snapshot_seq = %v, want 0", got)
			}
			if log := e.log.String(); !strings.Contains(log, "snapshot not usable; reading the change stream instead") || !strings.Contains(log, "reason="+tc.reason) {
				t.Errorf("no log line for the unusable snapshot:\n%s", log)
			}
		})
	}
}

// putSnapshot stores body under the name and metadata of a snapshot at seq.
func putSnapshot(t *testing.T, os jetstream.ObjectStore, seq uint64, body string) {
	t.Helper()
	if _, err := os.Put(testCtx(t), jetstream.ObjectMeta{
		Name:     fmt.Sprintf("changes-%020d", seq),
		Metadata: map[string]string{"seq": fmt.Sprint(seq), "time": time.Now().UTC().Format(time.RFC3339Nano), "objects": "0"},
	}, strings.NewReader(body)); err != nil {
		t.Fatal(err)
	}
}

// publishOne stores one record of Service default/name with data.
func publishOne(t *testing.T, e *env, name, data string) {
	t.Helper()
	p := e.start(t, ignoreSnapshots, func(o *publish.Options) { o.Registerer = nil })
	if _, err := p.Apply(testCtx(t), publish.Upsert(obj("Service", "default", name, data))); err != nil {
		t.Fatal(err)
	}
}
