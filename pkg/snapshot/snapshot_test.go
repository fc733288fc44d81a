package snapshot

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// nats.go's own leak on an object store Put (natstest.UpstreamLeaks) is
// ignored; every other goroutine is checked.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, natstest.UpstreamLeaks()...) }

// fixture is a JetStream with a CHANGES stream and a clock.
type fixture struct {
	t      *testing.T
	ctx    context.Context
	js     jetstream.JetStream
	names  bus.Names
	stream jetstream.Stream
	now    time.Time
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testutil.DefaultTimeout)
	t.Cleanup(cancel)
	_, js := natstest.Connect(t, natstest.Start(t))
	names := bus.Names{Prefix: "pw"}
	s, err := bus.EnsureStream(ctx, js, names.ChangesConfig(bus.StreamOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, ctx: ctx, js: js, names: names, stream: s, now: time.Now()}
}

func (f *fixture) snapshotter() *Snapshotter {
	s := New(Options{JS: f.js, Names: f.names, Retention: time.Hour, Now: func() time.Time { return f.now }})
	f.t.Cleanup(s.Close)
	return s
}

// put stores a record of object name with op, returning its sequence.
func (f *fixture) put(name string, op pb.Op, body string) uint64 {
	f.t.Helper()
	ref := &pb.ObjectRef{Version: "v1", Kind: "Service", Namespace: "ns", Name: name}
	data, err := proto.Marshal(&pb.ChangeRecord{Cluster: "c1", Ref: ref, Op: op, Object: []byte(body)})
	if err != nil {
		f.t.Fatal(err)
	}
	ack, err := f.js.Publish(f.ctx, f.names.ChangeSubject("c1", ref), data)
	if err != nil {
		f.t.Fatal(err)
	}
	return ack.Sequence
}

func (f *fixture) subject(name string) string {
	return f.names.ChangeSubject("c1", &pb.ObjectRef{Kind: "Service", Namespace: "ns", Name: name})
}

// onStream lists the sequences the stream holds per object name.
func (f *fixture) onStream(names ...string) map[string][]uint64 {
	f.t.Helper()
	info, err := f.stream.Info(f.ctx)
	if err != nil {
		f.t.Fatal(err)
	}
	out := make(map[string][]uint64)
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := f.stream.GetMsg(f.ctx, seq)
		if err != nil {
			continue // purged
		}
		for _, n := range names {
			if m.Subject == f.subject(n) {
				out[n] = append(out[n], seq)
			}
		}
	}
	return out
}

// snapshotSeqs reads the newest snapshot: live subject → seq.
func (f *fixture) snapshotSeqs() (uint64, map[string]uint64) {
	f.t.Helper()
	got := make(map[string]uint64)
	in, err := LoadLatest(f.ctx, f.js, f.names, 0, time.Time{}, func(r Record) error {
		got[r.Subject] = r.Seq
		return nil
	})
	if err != nil || in == nil {
		f.t.Fatalf("LoadLatest = %v, %v", in, err)
	}
	return in.Seq, got
}

// TestSnapshotAndCompaction: a snapshot holds exactly the live objects'
// last records; once it is older than the retention window, deleted
// subjects are purged and live ones keep only their last record, and a
// new snapshotter (a take-over) starts from the snapshot.
func TestSnapshotAndCompaction(t *testing.T) {
	f := newFixture(t)
	a1 := f.put("a", pb.Op_OP_ADD, "a1")
	a2 := f.put("a", pb.Op_OP_UPDATE, "a2")
	b1 := f.put("b", pb.Op_OP_ADD, "b1")
	b2 := f.put("b", pb.Op_OP_DELETE, "b1")
	c1 := f.put("c", pb.Op_OP_ADD, "c1")
	c2 := f.put("c", pb.Op_OP_DELETE, "c1")
	c3 := f.put("c", pb.Op_OP_ADD, "c3")
	d1 := f.put("d", pb.Op_OP_ADD, "d1")

	s := f.snapshotter()
	if _, err := s.Step(f.ctx); err != nil {
		t.Fatal(err)
	}
	seq, got := f.snapshotSeqs()
	want := map[string]uint64{f.subject("a"): a2, f.subject("c"): c3, f.subject("d"): d1}
	if seq != d1 || !cmp.Equal(want, got) {
		t.Fatalf("snapshot at %d = %v, want at %d %v", seq, got, d1, want)
	}
	// Within the window nothing is purged.
	all := map[string][]uint64{"a": {a1, a2}, "b": {b1, b2}, "c": {c1, c2, c3}, "d": {d1}}
	if diff := cmp.Diff(all, f.onStream("a", "b", "c", "d")); diff != "" {
		t.Fatalf("stream within the window (-want +got):\n%s", diff)
	}

	// Past the window: deleted subjects go, live ones keep their last record.
	f.now = f.now.Add(2 * time.Hour)
	if _, err := s.Step(f.ctx); err != nil {
		t.Fatal(err)
	}
	compacted := map[string][]uint64{"a": {a2}, "c": {c3}, "d": {d1}}
	if diff := cmp.Diff(compacted, f.onStream("a", "b", "c", "d")); diff != "" {
		t.Fatalf("stream after compaction (-want +got):\n%s", diff)
	}
	st, err := Open(f.ctx, f.js, f.names)
	if err != nil {
		t.Fatal(err)
	}
	if h, err := st.Horizon(f.ctx); err != nil || h != d1 {
		t.Errorf("horizon = %d, %v; want %d", h, err, d1)
	}

	// A take-over starts from the snapshot and follows what comes after.
	e1 := f.put("e", pb.Op_OP_ADD, "e1")
	a3 := f.put("a", pb.Op_OP_UPDATE, "a3")
	s2 := f.snapshotter()
	if _, err := s2.Step(f.ctx); err != nil {
		t.Fatal(err)
	}
	seq, got = f.snapshotSeqs()
	want = map[string]uint64{f.subject("a"): a3, f.subject("c"): c3, f.subject("d"): d1, f.subject("e"): e1}
	if seq != a3 || !cmp.Equal(want, got) {
		t.Fatalf("snapshot after take-over at %d = %v, want at %d %v", seq, got, a3, want)
	}
	// Its clock is past the window too: the new snapshot is the horizon,
	// the old one goes, and so does a's superseded record.
	if list, err := st.List(f.ctx); err != nil || len(list) != 1 || list[0].Seq != a3 {
		t.Errorf("snapshots kept = %v, %v; want only the one at %d", list, err, a3)
	}
	compacted = map[string][]uint64{"a": {a3}, "c": {c3}, "d": {d1}, "e": {e1}}
	if diff := cmp.Diff(compacted, f.onStream("a", "b", "c", "d", "e")); diff != "" {
		t.Fatalf("stream after the second compaction (-want +got):\n%s", diff)
	}
}

// TestPurgeKeepsARecreatedObject: an object deleted before the horizon
// and created again after the snapshotter planned its purge keeps its new
// record (purges are bounded by sequence, not by subject alone).
func TestPurgeKeepsARecreatedObject(t *testing.T) {
	f := newFixture(t)
	f.put("x", pb.Op_OP_ADD, "x1")
	f.put("x", pb.Op_OP_DELETE, "x1")
	keep := f.put("y", pb.Op_OP_ADD, "y1")
	s := f.snapshotter()
	if _, err := s.Step(f.ctx); err != nil {
		t.Fatal(err)
	}
	// x comes back after the snapshot, before the snapshotter reads it.
	again := f.put("x", pb.Op_OP_ADD, "x2")
	f.now = f.now.Add(2 * time.Hour)
	if err := s.compact(f.ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string][]uint64{"x": {again}, "y": {keep}}
	if diff := cmp.Diff(want, f.onStream("x", "y")); diff != "" {
		t.Fatalf("stream after compaction (-want +got):\n%s", diff)
	}
}

// TestCodecRoundTrip: entries come back as written, flags included.
func TestCodecRoundTrip(t *testing.T) {
	set := NewSet()
	at := time.Unix(1700000000, 123).UTC()
	for i, op := range []pb.Op{pb.Op_OP_ADD, pb.Op_OP_ADD, pb.Op_OP_UPDATE, pb.Op_OP_DELETE} {
		data, _ := proto.Marshal(&pb.ChangeRecord{Op: op, Object: []byte(fmt.Sprint(i))})
		subj := []string{"s.a", "s.b", "s.a", "s.b"}[i]
		if err := set.Add(Record{Subject: subj, Seq: uint64(10 + i), Time: at, Content: "h-1", Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if err := encode(&buf, set.entries(), false, false); err != nil {
		t.Fatal(err)
	}
	back := NewSet()
	if err := decode(&buf, func(r Record, fl byte) error { back.load(r, fl); return nil }); err != nil {
		t.Fatal(err)
	}
	back.setAt(set.Seq(), set.Time())
	if diff := cmp.Diff(set.entries(), back.entries(), cmp.AllowUnexported(entry{})); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
}

// TestPlanPurgesMovesOn: a live subject purged up to the horizon is not
// planned again until the horizon moves, so a cycle's limit reaches every
// subject in turn instead of repeating the first ones.
func TestPlanPurgesMovesOn(t *testing.T) {
	set := NewSet()
	seq := uint64(0)
	add := func(subj string, op pb.Op) {
		seq++
		data, _ := proto.Marshal(&pb.ChangeRecord{Op: op})
		if err := set.Add(Record{Subject: subj, Seq: seq, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []string{"a", "b", "c"} {
		add(s, pb.Op_OP_ADD)
	}
	horizon := seq
	for _, s := range []string{"a", "b", "c"} {
		add(s, pb.Op_OP_UPDATE) // after the horizon: their last records stay
	}
	var got []string
	for range 3 {
		plan := set.PlanPurges(horizon, 2)
		for _, p := range plan {
			got = append(got, p.Subject)
			set.Done(p)
		}
	}
	if diff := cmp.Diff([]string{"a", "b", "c"}, got); diff != "" {
		t.Errorf("purged subjects over three cycles (-want +got):\n%s", diff)
	}
	// a's last record was the first after the horizon: it has nothing left
	// to purge; b and c do once the horizon passes them.
	if plan := set.PlanPurges(seq, 0); len(plan) != 2 || plan[0].Subject != "b" || plan[1].Subject != "c" {
		t.Errorf("a horizon past their last records plans %v, want b and c", plan)
	}
}

// TestLatestWhenLastMessageLookupFails: listing an empty snapshot bucket
// ends even when the bucket's last-message lookup fails. nats.go's object
// store List waits forever in that case (it only marks the end of an
// empty listing on a "not found" answer), and a frontend starting on a
// freshly created 3-replica bucket, whose direct-get responders were not
// up yet, stalled there with no log line. Here the lookup is denied.
func TestLatestWhenLastMessageLookupFails(t *testing.T) {
	url := natstest.StartWith(t, func(o *server.Options) {
		all := &server.SubjectPermission{Allow: []string{">"}}
		o.Users = []*server.User{
			{Username: "admin", Password: "admin"},
			{Username: "nodirect", Password: "nodirect", Permissions: &server.Permissions{
				Publish:   &server.SubjectPermission{Allow: []string{">"}, Deny: []string{"$JS.API.DIRECT.GET.>"}},
				Subscribe: all,
			}},
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), testutil.DefaultTimeout)
	defer cancel()
	names := bus.Names{Prefix: "pw"}
	admin, err := nats.Connect(url, nats.UserInfo("admin", "admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	ajs, _ := jetstream.New(admin)
	if _, err := Ensure(ctx, ajs, names, bus.StreamOptions{}); err != nil {
		t.Fatal(err)
	}

	nc, err := nats.Connect(url, nats.UserInfo("nodirect", "nodirect"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err := Open(ctx, js, names)
	if err != nil || st == nil {
		t.Fatalf("Open = %v, %v", st, err)
	}
	// Bounded well inside the test's own timeout, so that the old hang
	// shows as this call's failure.
	lctx, lcancel := context.WithTimeout(ctx, 20*time.Second)
	defer lcancel()
	in, err := st.Latest(lctx, 0, time.Time{})
	if err != nil || in != nil {
		t.Fatalf("Latest on an empty bucket = %v, %v; want none and no error", in, err)
	}
}

// TestSnapshotView: with compact forms, each snapshot gets a view holding
// the same live records at the same sequences, a form instead of the data
// where there is one; compaction removes a snapshot's view with it, and a
// view whose snapshot is gone; a snapshot written without forms has none.
func TestSnapshotView(t *testing.T) {
	f := newFixture(t)
	a1 := f.put("a", pb.Op_OP_ADD, "a1")
	f.put("b", pb.Op_OP_ADD, "b1")
	f.put("b", pb.Op_OP_DELETE, "b1")
	c1 := f.put("c", pb.Op_OP_ADD, "c1")
	form := func(data []byte) []byte {
		var rec pb.ChangeRecord
		if err := proto.Unmarshal(data, &rec); err != nil || rec.GetRef().GetName() == "c" {
			return nil // c has none
		}
		return append([]byte("form:"), rec.GetObject()...)
	}
	s := New(Options{JS: f.js, Names: f.names, Retention: time.Hour, Now: func() time.Time { return f.now }, Model: form})
	t.Cleanup(s.Close)
	var st *Store
	step := func(s *Snapshotter) Info {
		t.Helper()
		if _, err := s.Step(f.ctx); err != nil {
			t.Fatal(err)
		}
		var err error
		if st, err = Open(f.ctx, f.js, f.names); err != nil || st == nil {
			t.Fatalf("Open = %v, %v", st, err)
		}
		in, err := st.Latest(f.ctx, 0, time.Time{})
		if err != nil || in == nil {
			t.Fatalf("Latest = %v, %v", in, err)
		}
		return *in
	}
	first := step(s)
	type rec struct {
		Seq         uint64
		Data, Model string
	}
	read := func(in Info) map[string]rec {
		t.Helper()
		got := make(map[string]rec)
		var kinds map[string]int
		if err := st.ReadView(f.ctx, in, func(k map[string]int) { kinds = k }, func(r Record) error {
			got[r.Subject] = rec{Seq: r.Seq, Data: string(r.Data), Model: string(r.Model)}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if want := map[string]int{"Service": len(got)}; !cmp.Equal(want, kinds) {
			t.Errorf("view's kinds = %v, want %v", kinds, want)
		}
		return got
	}
	cData, err := proto.Marshal(&pb.ChangeRecord{Cluster: "c1", Ref: &pb.ObjectRef{Version: "v1", Kind: "Service", Namespace: "ns", Name: "c"}, Op: pb.Op_OP_ADD, Object: []byte("c1")})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]rec{
		f.subject("a"): {Seq: a1, Model: "form:a1"},
		f.subject("c"): {Seq: c1, Data: string(cData)},
	}
	if diff := cmp.Diff(want, read(first)); diff != "" {
		t.Fatalf("view (-want +got):\n%s", diff)
	}

	// The next snapshot has its own view; past the window the first
	// snapshot goes, and its view with it.
	a2 := f.put("a", pb.Op_OP_UPDATE, "a2")
	f.now = f.now.Add(2 * time.Hour)
	second := step(s)
	want[f.subject("a")] = rec{Seq: a2, Model: "form:a2"}
	if diff := cmp.Diff(want, read(second)); diff != "" {
		t.Fatalf("second view (-want +got):\n%s", diff)
	}
	if err := st.ReadView(f.ctx, first, nil, func(Record) error { return nil }); !errors.Is(err, ErrNoView) {
		t.Errorf("the first snapshot's view after compaction: %v, want ErrNoView", err)
	}

	// A view left without its snapshot (removed by a snapshotter from
	// before views) is removed by the next compaction.
	if err := st.os.Delete(f.ctx, second.Name); err != nil {
		t.Fatal(err)
	}
	if err := s.compact(f.ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := st.os.GetInfo(f.ctx, viewName(second)); !errors.Is(err, jetstream.ErrObjectNotFound) {
		t.Errorf("orphan view after compaction: %v, want not found", err)
	}

	// Without forms there is no view, and readers are told so.
	f.put("d", pb.Op_OP_ADD, "d1")
	third := step(f.snapshotter())
	if err := st.ReadView(f.ctx, third, nil, func(Record) error { return nil }); !errors.Is(err, ErrNoView) {
		t.Errorf("ReadView of a snapshot without forms: %v, want ErrNoView", err)
	}
}
