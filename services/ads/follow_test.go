package ads

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	promtest "github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/model"
	"github.com/pilotwire/pilotwire/pkg/snapshot"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// lockedBuffer is a log sink the follower's goroutines may write while the
// test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// errors returns the error lines holding substr.
func (l *lockedBuffer) errors(substr string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range strings.Split(l.b.String(), "\n") {
		if strings.Contains(line, "level=ERROR") && strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return out
}

// followEnv is a bare follower on embedded JetStream: the test publishes
// raw change messages and reads the follower's store, gate, metrics and log.
type followEnv struct {
	js    jetstream.JetStream
	names bus.Names
	f     *follower
	log   *lockedBuffer
}

func newFollowEnv(t *testing.T, fullReplay bool) *followEnv {
	t.Helper()
	url := natstest.Start(t)
	_, js := natstest.Connect(t, url)
	names, _ := bus.NewNames("pw")
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	if _, err := bus.EnsureStream(ctx, js, names.ChangesConfig(bus.StreamOptions{})); err != nil {
		t.Fatal(err)
	}
	lb := &lockedBuffer{}
	f := newFollower(js, names, model.NewStore(), newSeqGate(), slog.New(slog.NewTextHandler(lb, nil)), newMetrics(prometheus.NewRegistry()))
	f.fullReplay = fullReplay
	return &followEnv{js: js, names: names, f: f, log: lb}
}

// publishRaw publishes data on the change subject of ref and returns its
// sequence.
func (e *followEnv) publishRaw(t *testing.T, ref *pb.ObjectRef, data []byte) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	ack, err := e.js.Publish(ctx, e.names.ChangeSubject("c1", ref), data)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// publishObject publishes a change record of obj (nil for a delete).
func (e *followEnv) publishObject(t *testing.T, op pb.Op, ref *pb.ObjectRef, obj any) uint64 {
	t.Helper()
	return e.publishRecord(t, ref, objectRecord(t, op, ref, obj))
}

// objectRecord is a change record of obj (nil for a delete) in cluster c1.
func objectRecord(t *testing.T, op pb.Op, ref *pb.ObjectRef, obj any) *pb.ChangeRecord {
	t.Helper()
	var body []byte
	if obj != nil {
		var err error
		if body, err = json.Marshal(obj); err != nil {
			t.Fatal(err)
		}
	}
	return &pb.ChangeRecord{Cluster: "c1", Op: op, Ref: ref, Object: body, Uid: ref.GetName()}
}

func (e *followEnv) publishRecord(t *testing.T, subject *pb.ObjectRef, rec *pb.ChangeRecord) uint64 {
	t.Helper()
	data, err := proto.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	return e.publishRaw(t, subject, data)
}

func serviceRef(name string) *pb.ObjectRef {
	return &pb.ObjectRef{Kind: model.KindService, Namespace: "shop", Name: name}
}

func sliceRef(name string) *pb.ObjectRef {
	return &pb.ObjectRef{Group: "discovery.k8s.io", Kind: model.KindEndpointSlice, Namespace: "shop", Name: name + "-1"}
}

// waitApplied waits until the follower's gate has passed seq.
func (e *followEnv) waitApplied(t *testing.T, seq uint64) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	if err := e.f.gate.wait(ctx, seq); err != nil {
		t.Fatal(err)
	}
}

// endpointsOf returns the addresses of the service's first port.
func endpointsOf(s *model.Store, name string) []string {
	svc := s.Snapshot().ServiceFor("shop", name)
	if svc == nil || len(svc.Ports) == 0 {
		return nil
	}
	var out []string
	for _, ep := range svc.Ports[0].Endpoints {
		out = append(out, ep.Address)
	}
	return out
}

// TestFollowerSkipsBadRecords: a record that is not a ChangeRecord, one
// whose object does not decode and one without an object ref are each
// logged with their sequence, counted in
// pilotwire_ads_bad_change_records_total and skipped, both in the replay
// at start and while following; the sequences still count as applied, so
// the frontend gets ready when the stream's last record is a bad one, and
// the records around them are applied in order.
func TestFollowerSkipsBadRecords(t *testing.T) {
	e := newFollowEnv(t, false)
	e.publishObject(t, pb.Op_OP_ADD, serviceRef("good"), service("shop", "good", 80))
	e.publishObject(t, pb.Op_OP_ADD, sliceRef("good"), slice("shop", "good", 8080, "10.1.0.1", "10.1.0.2"))
	badJSON := e.publishRecord(t, serviceRef("badjson"), &pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_ADD, Ref: serviceRef("badjson"), Object: []byte(`{"spec": 5}`)})
	noRef := e.publishRecord(t, serviceRef("noref"), &pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_ADD, Object: []byte(`{}`)})
	garbage := e.publishRaw(t, serviceRef("garbage"), []byte("\xff\xff not a change record"))

	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	stop, err := e.f.start(ctx)
	if err != nil {
		t.Fatalf("start with bad records last: %v", err)
	}
	defer stop()
	if got := e.f.gate.get(); got != garbage {
		t.Errorf("applied seq at start = %d, want the stream's last %d", got, garbage)
	}
	if got := promtest.ToFloat64(e.f.metrics.badRecords); got != 3 {
		t.Errorf("bad records after replay = %v, want 3", got)
	}
	if got, want := endpointsOf(e.f.store, "good"), []string{"10.1.0.1", "10.1.0.2"}; !slices.Equal(got, want) {
		t.Errorf("endpoints after replay = %v, want %v", got, want)
	}
	if e.f.store.Snapshot().ServiceFor("shop", "badjson") != nil {
		t.Error("a Service whose object does not decode is in the mesh")
	}
	wantLogs := map[string]uint64{"undecodable change record": garbage, "change record not applied": badJSON}
	for msg, seq := range wantLogs {
		if lines := e.log.errors(fmt.Sprintf("seq=%d ", seq)); len(lines) != 1 || !strings.Contains(lines[0], msg) {
			t.Errorf("log lines for seq %d = %q, want one error %q", seq, lines, msg)
		}
	}
	if lines := e.log.errors(fmt.Sprintf("seq=%d ", noRef)); len(lines) != 1 || !strings.Contains(lines[0], "no object ref") {
		t.Errorf("log lines for seq %d = %q, want one saying the record has no object ref", noRef, lines)
	}

	// While following: bad records between updates of the same objects.
	e.publishRaw(t, serviceRef("garbage"), []byte("\x0a\x09short")) // a truncated field
	e.publishObject(t, pb.Op_OP_UPDATE, sliceRef("good"), slice("shop", "good", 8080, "10.1.0.3"))
	e.publishRecord(t, sliceRef("good"), &pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_UPDATE, Ref: sliceRef("good"), Object: []byte(`[1, 2]`)})
	last := e.publishObject(t, pb.Op_OP_UPDATE, sliceRef("good"), slice("shop", "good", 8080, "10.1.0.4", "10.1.0.5"))
	e.waitApplied(t, last)
	if got := promtest.ToFloat64(e.f.metrics.badRecords); got != 5 {
		t.Errorf("bad records after following = %v, want 5", got)
	}
	if got, want := endpointsOf(e.f.store, "good"), []string{"10.1.0.4", "10.1.0.5"}; !slices.Equal(got, want) {
		t.Errorf("endpoints after following = %v, want %v", got, want)
	}
	if got := promtest.ToFloat64(e.f.metrics.appliedSeq); got != float64(last) {
		t.Errorf("pilotwire_ads_applied_seq = %v, want %d", got, last)
	}
}

// TestFollowerAppliesInOrder: a full replay of many records of a few
// objects, then more of them while following, ends with each object's
// last record, and the applied sequence never runs ahead of the model.
func TestFollowerAppliesInOrder(t *testing.T) {
	e := newFollowEnv(t, true)
	e.f.decoders = 4              // more than the cores here: decoders finish out of turn
	const objects, rounds = 5, 61 // neither last round deletes
	publishRound := func(r int) uint64 {
		var seq uint64
		for o := range objects {
			name := fmt.Sprintf("svc-%d", o)
			if r%7 == 3 {
				seq = e.publishObject(t, pb.Op_OP_DELETE, sliceRef(name), nil)
				continue
			}
			seq = e.publishObject(t, pb.Op_OP_ADD, sliceRef(name), slice("shop", name, 8080, fmt.Sprintf("10.%d.0.%d", o, r%250+1)))
		}
		return seq
	}
	for o := range objects {
		e.publishObject(t, pb.Op_OP_ADD, serviceRef(fmt.Sprintf("svc-%d", o)), service("shop", fmt.Sprintf("svc-%d", o), 80))
	}
	for r := range rounds {
		publishRound(r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	stop, err := e.f.start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	check := func(when string, r int) {
		t.Helper()
		for o := range objects {
			want := []string{fmt.Sprintf("10.%d.0.%d", o, r%250+1)}
			if got := endpointsOf(e.f.store, fmt.Sprintf("svc-%d", o)); !slices.Equal(got, want) {
				t.Errorf("%s: svc-%d endpoints = %v, want %v", when, o, got, want)
			}
		}
	}
	check("after replay", rounds-1)
	if got, want := e.f.store.AppliedSeq(), e.f.gate.get(); got != want {
		t.Errorf("store applied %d, gate %d", got, want)
	}
	var last uint64
	for r := rounds; r < 2*rounds; r++ {
		last = publishRound(r)
	}
	e.waitApplied(t, last)
	check("after following", 2*rounds-1)
	if got := promtest.ToFloat64(e.f.metrics.badRecords); got != 0 {
		t.Errorf("bad records = %v, want 0", got)
	}
}

// TestFollowerStartsWithTheMeshBuilt: start returns (and the frontend
// reports ready and listens) only once the mesh of the replayed records is
// built, so the first proxies are served from it instead of waiting for
// the build, and a replay's measured time covers all of its work.
func TestFollowerStartsWithTheMeshBuilt(t *testing.T) {
	e := newFollowEnv(t, false)
	const services = 4000 // a build that takes long enough to be seen unfinished
	var recs []*pb.ChangeRecord
	for i := range services {
		name := fmt.Sprintf("svc-%d", i)
		recs = append(recs, objectRecord(t, pb.Op_OP_ADD, serviceRef(name), service("shop", name, 80)),
			objectRecord(t, pb.Op_OP_ADD, sliceRef(name), slice("shop", name, 8080, fmt.Sprintf("10.1.%d.%d", i/250, i%250+1))))
	}
	natstest.PublishRecords(t, e.js, e.names, recs)
	e.start(t)
	if !e.f.store.Built() {
		t.Fatal("start returned before the mesh of the replayed records was built")
	}
	e.checkServices(t, services)
}

// start starts the follower, stopped at the end of the test.
func (e *followEnv) start(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	stop, err := e.f.start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
}

// checkServices checks the follower's model holds want Services.
func (e *followEnv) checkServices(t *testing.T, want int) {
	t.Helper()
	if got := len(e.f.store.Snapshot().Services); got != want {
		t.Errorf("services after start = %d, want %d", got, want)
	}
}

// startFromSnapshot writes a snapshot of the stream with form as its
// compact forms, starts the follower, and returns its stop.
func (e *followEnv) startFromSnapshot(ctx context.Context, t *testing.T, form func([]byte) []byte) (stop func()) {
	t.Helper()
	sn := snapshot.New(snapshot.Options{JS: e.js, Names: e.names, Model: form})
	defer sn.Close()
	if _, err := sn.Step(ctx); err != nil {
		t.Fatal(err)
	}
	stop, err := e.f.start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return stop
}

// TestFollowerFallsBackFromRefusedCompactForms: a snapshot whose compact
// forms do not decode still starts the model right, from the records
// beside them; every refused form is counted and the first one logged.
func TestFollowerFallsBackFromRefusedCompactForms(t *testing.T) {
	e := newFollowEnv(t, false)
	e.publishObject(t, pb.Op_OP_ADD, serviceRef("good"), service("shop", "good", 80))
	e.publishObject(t, pb.Op_OP_ADD, sliceRef("good"), slice("shop", "good", 8080, "10.1.0.1", "10.1.0.2"))
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	garbled := func([]byte) []byte { return []byte{0xee, 1, 2} } // no version this reader knows
	defer e.startFromSnapshot(ctx, t, garbled)()
	if got, want := endpointsOf(e.f.store, "good"), []string{"10.1.0.1", "10.1.0.2"}; !slices.Equal(got, want) {
		t.Errorf("endpoints after the start from the snapshot = %v, want %v", got, want)
	}
	if got := promtest.ToFloat64(e.f.metrics.compactRefused); got != 2 {
		t.Errorf("pilotwire_ads_snapshot_compact_forms_refused_total = %v, want 2", got)
	}
	if got := promtest.ToFloat64(e.f.metrics.snapshotSeq); got == 0 {
		t.Error("the frontend did not start from the snapshot")
	}
	// The view holds the same forms and nothing beside them: it is left
	// at its first form, for the snapshot itself.
	if got := promtest.ToFloat64(e.f.metrics.snapshotViewUnusable); got != 1 {
		t.Errorf("pilotwire_ads_snapshot_views_unusable_total = %v, want 1", got)
	}
	e.log.mu.Lock()
	logged := strings.Count(e.log.b.String(), "compact form in the snapshot refused")
	e.log.mu.Unlock()
	if logged != 1 {
		t.Errorf("refused compact forms logged %d times, want once", logged)
	}
}

// TestFollowerLeavesAViewAtARefusedForm: a form in a snapshot's view that
// has a known layout but does not decode leaves the view for the snapshot
// itself, and nothing of the view after that form is applied, so the
// snapshot gives the refused object from its record (the store skips
// sequences it applied, so a record of the view applied past the refused
// one would have hidden it).
func TestFollowerLeavesAViewAtARefusedForm(t *testing.T) {
	e := newFollowEnv(t, false)
	for _, name := range []string{"a", "b", "c"} {
		e.publishObject(t, pb.Op_OP_ADD, serviceRef(name), service("shop", name, 80))
		e.publishObject(t, pb.Op_OP_ADD, sliceRef(name), slice("shop", name, 8080, "10.1.0.1", "10.1.0.2"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	cut := func(data []byte) []byte {
		form := model.CompactRecord(data)
		var rec pb.ChangeRecord
		if err := proto.Unmarshal(data, &rec); err == nil && rec.GetRef().GetName() == "b-1" {
			return form[:len(form)/2] // its version byte, then too little
		}
		return form
	}
	defer e.startFromSnapshot(ctx, t, cut)()
	for _, name := range []string{"a", "b", "c"} {
		if got, want := endpointsOf(e.f.store, name), []string{"10.1.0.1", "10.1.0.2"}; !slices.Equal(got, want) {
			t.Errorf("%s: endpoints after the start from the snapshot = %v, want %v", name, got, want)
		}
	}
	if got := promtest.ToFloat64(e.f.metrics.snapshotViewUnusable); got != 1 {
		t.Errorf("pilotwire_ads_snapshot_views_unusable_total = %v, want 1", got)
	}
	if got := promtest.ToFloat64(e.f.metrics.bootstrapView); got != 0 {
		t.Errorf("pilotwire_ads_bootstrap_snapshot_view = %v, want 0", got)
	}
	// Refused again in the snapshot itself, where the record beside it
	// stands in: counted there, once.
	if got := promtest.ToFloat64(e.f.metrics.compactRefused); got != 1 {
		t.Errorf("pilotwire_ads_snapshot_compact_forms_refused_total = %v, want 1", got)
	}
	if got := promtest.ToFloat64(e.f.metrics.badRecords); got != 0 {
		t.Errorf("pilotwire_ads_bad_change_records_total = %v, want 0", got)
	}
	e.log.mu.Lock()
	logged := strings.Count(e.log.b.String(), "snapshot view not usable")
	e.log.mu.Unlock()
	if logged != 1 {
		t.Errorf("unusable view logged %d times, want once", logged)
	}
}

// TestFollowerReplaysLargeRecords: a history of records near the stream's
// largest replays whole, in pulls sized for them (bus.ReplayPullSize):
// 40 Services of 900 KiB each, 36 MB.
func TestFollowerReplaysLargeRecords(t *testing.T) {
	e := newFollowEnv(t, false)
	const services = 40
	note := strings.Repeat("x", 900<<10)
	var recs []*pb.ChangeRecord
	for i := range services {
		name := fmt.Sprintf("big-%d", i)
		svc := service("shop", name, 80)
		svc["metadata"].(map[string]any)["annotations"] = map[string]any{"example.com/note": note}
		recs = append(recs, objectRecord(t, pb.Op_OP_ADD, serviceRef(name), svc))
	}
	natstest.PublishRecords(t, e.js, e.names, recs)
	e.start(t)
	e.checkServices(t, services)
}
