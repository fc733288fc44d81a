package publish_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

func TestSyncPublishesInitialSet(t *testing.T) {
	e := newEnv(t)
	p := e.start(t)
	desired := []publish.Object{obj("Service", "default", "a", "1"), obj("ConfigMap", "ns", "b.c", "2")}
	desired = append(desired, publish.Object{
		Key: publish.Key{Group: "networking.istio.io", Kind: "VirtualService", Namespace: "default", Name: "r"}, Version: "v1",
		UID: "given-uid", JSON: []byte(`{"kind":"VirtualService"}`), Source: "test:r",
	})
	res, err := p.Sync(testCtx(t), desired)
	if err != nil {
		t.Fatalf("sync: %v", err)
	}
	if diff := cmp.Diff(publish.Result{Published: 3}, res); diff != "" {
		t.Errorf("result (-want +got):\n%s", diff)
	}
	recs := e.records(t)
	if diff := cmp.Diff([]string{"OP_ADD Service default/a", "OP_ADD ConfigMap ns/b.c", "OP_ADD VirtualService default/r"}, summary(recs)); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
	for i, r := range recs {
		o := desired[i]
		if r.rec.GetCluster() != cluster || string(r.rec.GetObject()) != string(o.JSON) || r.rec.GetSource() != o.Source ||
			r.rec.GetRef().GetVersion() != "v1" || r.rec.GetRef().GetGroup() != o.Key.Group || r.rec.GetObservedAt() == nil {
			t.Errorf("record %d does not carry the object: %v", i, r.rec)
		}
		if want := names.ChangeSubject(cluster, r.rec.GetRef()); r.subject != want {
			t.Errorf("record %d subject %q, want %q", i, r.subject, want)
		}
		wantUID := o.UID
		if wantUID == "" {
			wantUID = publish.SynthUID(cluster, o.Key, 0)
		}
		if r.rec.GetUid() != wantUID {
			t.Errorf("record %d uid %q, want %q", i, r.rec.GetUid(), wantUID)
		}
		if want := publish.ContentVersion(o.JSON); r.rec.GetResourceVersion() != want || !strings.HasPrefix(want, "h-") || len(want) != 18 {
			t.Errorf("record %d resourceVersion %q, want %q", i, r.rec.GetResourceVersion(), want)
		}
		if want := publish.MsgID(cluster, wantUID, r.rec.GetResourceVersion(), pb.Op_OP_ADD, 0); r.msgID != want {
			t.Errorf("record %d msg id %q, want %q", i, r.msgID, want)
		}
	}
	if got := metric(t, e.reg, "pilotwire_ingest_records_published_total", map[string]string{"kind": "VirtualService.networking.istio.io", "op": "ADD"}); got != 1 {
		t.Errorf("published{VirtualService.networking.istio.io,ADD} = %v, want 1", got)
	}
	if got := metric(t, e.reg, "pilotwire_ingest_objects", nil); got != 3 {
		t.Errorf("objects gauge = %v, want 3", got)
	}
	if got := metric(t, e.reg, "pilotwire_ingest_last_published_seq", nil); got != float64(recs[2].seq) {
		t.Errorf("last seq gauge = %v, want %d", got, recs[2].seq)
	}
}

func TestApplyUpdateUnchangedDelete(t *testing.T) {
	e := newEnv(t)
	p := e.start(t)
	ctx := testCtx(t)
	a1, a2 := obj("Service", "default", "a", "1"), obj("Service", "default", "a", "2")
	if _, err := p.Apply(ctx, publish.Upsert(a1)); err != nil {
		t.Fatal(err)
	}
	res, err := p.Apply(ctx, publish.Upsert(a2))
	if err != nil || res != (publish.Result{Published: 1}) {
		t.Fatalf("update: %+v, %v", res, err)
	}
	res, err = p.Apply(ctx, publish.Upsert(a2))
	if err != nil || res != (publish.Result{Unchanged: 1}) {
		t.Fatalf("unchanged re-apply: %+v, %v", res, err)
	}
	res, err = p.Apply(ctx, publish.Delete(publish.Object{Key: a2.Key}))
	if err != nil || res != (publish.Result{Published: 1}) {
		t.Fatalf("delete: %+v, %v", res, err)
	}
	res, err = p.Apply(ctx, publish.Delete(publish.Object{Key: a2.Key}))
	if err != nil || res != (publish.Result{Unchanged: 1}) {
		t.Fatalf("delete again: %+v, %v", res, err)
	}
	recs := e.records(t)
	if diff := cmp.Diff([]string{"OP_ADD Service default/a", "OP_UPDATE Service default/a", "OP_DELETE Service default/a"}, summary(recs)); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
	uid := recs[0].rec.GetUid()
	for i, r := range recs {
		if r.rec.GetUid() != uid {
			t.Errorf("record %d uid %q, want the incarnation's %q", i, r.rec.GetUid(), uid)
		}
	}
	del := recs[2].rec
	if string(del.GetObject()) != string(a2.JSON) || del.GetResourceVersion() != publish.ContentVersion(a2.JSON) {
		t.Errorf("delete record carries %q rv %q, want the last object %q", del.GetObject(), del.GetResourceVersion(), a2.JSON)
	}
	if recs[1].msgID != publish.MsgID(cluster, uid, publish.ContentVersion(a2.JSON), pb.Op_OP_UPDATE, recs[0].seq) {
		t.Errorf("update msg id %q", recs[1].msgID)
	}
	if got := metric(t, e.reg, "pilotwire_ingest_objects", nil); got != 0 {
		t.Errorf("objects gauge = %v, want 0", got)
	}
}

func TestRestartWithSameDesiredSetPublishesNothing(t *testing.T) {
	e := newEnv(t)
	desired := []publish.Object{obj("Service", "default", "a", "1"), obj("Service", "default", "b", "1"), obj("Namespace", "", "n", "1")}
	p1 := e.start(t)
	if _, err := p1.Sync(testCtx(t), desired); err != nil {
		t.Fatal(err)
	}
	before := len(e.records(t))

	p2 := e.start(t)
	if got := len(p2.Live()); got != 3 {
		t.Fatalf("restarted publisher knows %d live objects, want 3", got)
	}
	s, err := e.js.Stream(testCtx(t), names.ChangesStream())
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Consumers != 0 {
		t.Errorf("stream keeps %d consumers after start, want 0", info.State.Consumers)
	}
	res, err := p2.Sync(testCtx(t), desired)
	if err != nil {
		t.Fatal(err)
	}
	if res != (publish.Result{Unchanged: 3}) {
		t.Errorf("result %+v, want 3 unchanged", res)
	}
	if after := len(e.records(t)); after != before {
		t.Errorf("restart published %d records, want 0", after-before)
	}
}

func TestRestartDeletesObjectThatVanished(t *testing.T) {
	e := newEnv(t)
	a, b := obj("Service", "default", "a", "1"), obj("ConfigMap", "x", "b", "1")
	p1 := e.start(t)
	if _, err := p1.Sync(testCtx(t), []publish.Object{a, b}); err != nil {
		t.Fatal(err)
	}

	p2 := e.start(t)
	res, err := p2.Sync(testCtx(t), []publish.Object{a})
	if err != nil || res != (publish.Result{Published: 1, Unchanged: 1}) {
		t.Fatalf("sync: %+v, %v", res, err)
	}
	recs := e.records(t)
	if diff := cmp.Diff([]string{"OP_ADD Service default/a", "OP_ADD ConfigMap x/b", "OP_DELETE ConfigMap x/b"}, summary(recs)); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
	del := recs[2].rec
	if string(del.GetObject()) != string(b.JSON) || del.GetUid() != recs[1].rec.GetUid() || del.GetSource() != b.Source {
		t.Errorf("delete record %v does not carry the last object and uid", del)
	}
}

func TestDeleteThenRecreateGetsNewUID(t *testing.T) {
	e := newEnv(t)
	p := e.start(t)
	ctx := testCtx(t)
	a := obj("Service", "default", "a", "1")
	for _, c := range []publish.Change{publish.Upsert(a), publish.Delete(a), publish.Upsert(a)} {
		if _, err := p.Apply(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	// A restarted ingest keeps the live incarnation's uid.
	p2 := e.start(t)
	if _, err := p2.Apply(ctx, publish.Upsert(obj("Service", "default", "a", "2"))); err != nil {
		t.Fatal(err)
	}
	recs := e.records(t)
	if diff := cmp.Diff([]string{"OP_ADD Service default/a", "OP_DELETE Service default/a", "OP_ADD Service default/a", "OP_UPDATE Service default/a"}, summary(recs)); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
	first, second := recs[0].rec.GetUid(), recs[2].rec.GetUid()
	if first == second {
		t.Errorf("recreated object kept uid %q", first)
	}
	if second != publish.SynthUID(cluster, a.Key, recs[1].seq) {
		t.Errorf("recreated uid %q is not derived from the delete's sequence", second)
	}
	if got := recs[3].rec.GetUid(); got != second {
		t.Errorf("update after restart has uid %q, want %q", got, second)
	}
	if recs[0].msgID == recs[2].msgID {
		t.Errorf("both incarnations share msg id %q", recs[0].msgID)
	}
}

func TestOrderOfOneObjectInOneApply(t *testing.T) {
	e := newEnv(t)
	p := e.start(t)
	a := func(v string) publish.Object { return obj("Service", "default", "a", v) }
	b := obj("Service", "default", "b", "1")
	res, err := p.Apply(testCtx(t), publish.Upsert(a("1")), publish.Upsert(b), publish.Upsert(a("2")), publish.Delete(a("2")), publish.Upsert(a("3")))
	if err != nil || res != (publish.Result{Published: 5}) {
		t.Fatalf("apply: %+v, %v", res, err)
	}
	var got []string
	for _, r := range e.records(t) {
		if r.rec.GetRef().GetName() == "a" {
			got = append(got, r.rec.GetOp().String()+" "+string(r.rec.GetObject()[len(r.rec.GetObject())-60:]))
		}
	}
	want := []string{
		"OP_ADD " + string(a("1").JSON[len(a("1").JSON)-60:]),
		"OP_UPDATE " + string(a("2").JSON[len(a("2").JSON)-60:]),
		"OP_DELETE " + string(a("2").JSON[len(a("2").JSON)-60:]),
		"OP_ADD " + string(a("3").JSON[len(a("3").JSON)-60:]),
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("records of a (-want +got):\n%s", diff)
	}
}

func TestRevertWithinDedupWindowIsPublished(t *testing.T) {
	e := newEnv(t)
	p := e.start(t)
	ctx := testCtx(t)
	for _, v := range []string{"A", "B", "A"} {
		res, err := p.Apply(ctx, publish.Upsert(obj("ConfigMap", "default", "c", v)))
		if err != nil || res.Published != 1 {
			t.Fatalf("apply %s: %+v, %v", v, res, err)
		}
	}
	recs := e.records(t)
	if diff := cmp.Diff([]string{"OP_ADD ConfigMap default/c", "OP_UPDATE ConfigMap default/c", "OP_UPDATE ConfigMap default/c"}, summary(recs)); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
	if recs[2].rec.GetResourceVersion() != recs[0].rec.GetResourceVersion() {
		t.Errorf("reverted content has rv %q, first had %q", recs[2].rec.GetResourceVersion(), recs[0].rec.GetResourceVersion())
	}
}

func TestOversizedRecordIsRejected(t *testing.T) {
	e := newEnv(t)
	p := e.start(t, func(o *publish.Options) { o.Stream.MaxMsgSize = 4096 })
	big := obj("ConfigMap", "default", "huge", strings.Repeat("x", 5000))
	small := obj("ConfigMap", "default", "small", "1")
	res, err := p.Sync(testCtx(t), []publish.Object{big, small})
	if err != nil {
		t.Fatal(err)
	}
	if res != (publish.Result{Published: 1, Rejected: 1}) {
		t.Errorf("result %+v, want 1 published and 1 rejected", res)
	}
	if diff := cmp.Diff([]string{"OP_ADD ConfigMap default/small"}, summary(e.records(t))); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
	if got := metric(t, e.reg, "pilotwire_ingest_rejected_records_total", map[string]string{"reason": "too_large"}); got != 1 {
		t.Errorf("rejected{too_large} = %v, want 1", got)
	}
	logs := e.log.String()
	for _, want := range []string{"level=ERROR", "reason=too_large", "source=test:huge", "kind=ConfigMap", "name=huge", "limit=4096"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q:\n%s", want, logs)
		}
	}
	// Still rejected, not published, when it comes again.
	if res, err := p.Apply(testCtx(t), publish.Upsert(big)); err != nil || res != (publish.Result{Rejected: 1}) {
		t.Errorf("re-apply: %+v, %v", res, err)
	}
}

// TestOverlongSubjectIsRejected: an object whose subject would pass the
// server's control line limit is refused, logged and counted, and the
// connection stays up for everything else (nats.go closes a connection
// for good when the server refuses a control line).
func TestOverlongSubjectIsRejected(t *testing.T) {
	e := newEnv(t)
	p := e.start(t)
	long := obj("ConfigMap", "default", strings.Repeat("a.", 1500)+"z", "1")
	small := obj("ConfigMap", "default", "small", "1")
	res, err := p.Sync(testCtx(t), []publish.Object{long, small})
	if err != nil {
		t.Fatal(err)
	}
	if res != (publish.Result{Published: 1, Rejected: 1}) {
		t.Errorf("result %+v, want 1 published and 1 rejected", res)
	}
	if got := metric(t, e.reg, "pilotwire_ingest_rejected_records_total", map[string]string{"reason": "subject_too_long"}); got != 1 {
		t.Errorf("rejected{subject_too_long} = %v, want 1", got)
	}
	// The connection still works: the next change is published.
	if res, err := p.Apply(testCtx(t), publish.Upsert(obj("ConfigMap", "default", "after", "1"))); err != nil || res != (publish.Result{Published: 1}) {
		t.Fatalf("publish after the rejected object: %+v, %v", res, err)
	}
	if diff := cmp.Diff([]string{"OP_ADD ConfigMap default/small", "OP_ADD ConfigMap default/after"}, summary(e.records(t))); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

func TestOversizedDeleteDropsTheObject(t *testing.T) {
	e := newEnv(t)
	p := e.start(t, func(o *publish.Options) { o.Stream.MaxMsgSize = 4096 })
	o := obj("ConfigMap", "default", "c", "1")
	if _, err := p.Apply(testCtx(t), publish.Upsert(o)); err != nil {
		t.Fatal(err)
	}
	// The source reports the delete with a last object too big to store:
	// the delete still goes out, with its key and uid.
	big := obj("ConfigMap", "default", "c", strings.Repeat("x", 5000))
	res, err := p.Apply(testCtx(t), publish.Delete(big))
	if err != nil || res != (publish.Result{Published: 1}) {
		t.Fatalf("delete: %+v, %v", res, err)
	}
	recs := e.records(t)
	last := recs[len(recs)-1].rec
	if last.GetOp() != pb.Op_OP_DELETE || len(last.GetObject()) != 0 || last.GetUid() != recs[0].rec.GetUid() {
		t.Errorf("oversized delete = %v, want a DELETE with uid and no object", last)
	}
}

func TestMsgIDDeduplicatesASecondWriter(t *testing.T) {
	e := newEnv(t)
	p1, p2 := e.start(t), e.start(t) // both read the same (empty) stream
	a := obj("Service", "default", "a", "1")
	if res, err := p1.Apply(testCtx(t), publish.Upsert(a)); err != nil || res.Published != 1 {
		t.Fatalf("p1: %+v, %v", res, err)
	}
	// p2 does not know about p1's record: it publishes the same change
	// with the same id, which JetStream drops.
	res, err := p2.Apply(testCtx(t), publish.Upsert(a))
	if err != nil || res != (publish.Result{Deduplicated: 1}) {
		t.Fatalf("p2: %+v, %v", res, err)
	}
	recs := e.records(t)
	if len(recs) != 1 {
		t.Fatalf("stream holds %d records, want 1", len(recs))
	}
	// p2 learned the record's sequence: its next change follows it.
	if res, err := p2.Apply(testCtx(t), publish.Upsert(obj("Service", "default", "a", "2"))); err != nil || res.Published != 1 {
		t.Fatalf("p2 update: %+v, %v", res, err)
	}
	// A raw republish of the first record, as after a crash, is dropped too.
	raw := &nats.Msg{Subject: recs[0].subject, Header: nats.Header{}}
	raw.Header.Set(jetstream.MsgIDHeader, recs[0].msgID)
	ack, err := e.js.PublishMsg(testCtx(t), raw)
	if err != nil || !ack.Duplicate || ack.Sequence != recs[0].seq {
		t.Fatalf("raw republish: %+v, %v; want duplicate of seq %d", ack, err, recs[0].seq)
	}
	if got := metric(t, e.reg, "pilotwire_ingest_records_deduplicated_total", nil); got != 1 {
		t.Errorf("deduplicated = %v, want 1", got)
	}
}

// TestStaleWriterConflictIsReplanned: a writer whose queued change meets
// another writer's newer record re-reads its source and plans that, never
// the queued change: during a rolling update the old pod's queued
// resourceVersion 5 must not overwrite the new pod's 7.
func TestStaleWriterConflictIsReplanned(t *testing.T) {
	withRV := func(o publish.Object, rv string) publish.Object {
		o.UID, o.ResourceVersion = "uid-a", rv
		return o
	}
	v5 := withRV(obj("Service", "default", "a", "5"), "5")
	v7 := withRV(obj("Service", "default", "a", "7"), "7")
	v8 := withRV(obj("Service", "default", "a", "8"), "8")
	for _, tc := range []struct {
		name    string
		current publish.Object // what the stale writer's source says after the conflict
		want    []string       // resourceVersions on the stream
		publish int
	}{
		{name: "source caught up with the other writer", current: v7, want: []string{"7"}},
		{name: "source moved on", current: v8, want: []string{"7", "8"}, publish: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			var reread []publish.Key
			p1 := e.start(t)
			p2 := e.start(t, func(o *publish.Options) {
				o.Reread = func(k publish.Key) (publish.Change, bool) {
					reread = append(reread, k)
					return publish.Upsert(tc.current), true
				}
			})
			if _, err := p1.Apply(testCtx(t), publish.Upsert(v7)); err != nil {
				t.Fatal(err)
			}
			// p2 believes the subject is empty and has rv 5 queued: its ADD
			// is refused (wrong last subject sequence); it reads p1's
			// record and asks its source again.
			res, err := p2.Apply(testCtx(t), publish.Upsert(v5))
			if err != nil || res.Published != tc.publish {
				t.Fatalf("p2: %+v, %v; want %d published", res, err, tc.publish)
			}
			var got []string
			for _, r := range e.records(t) {
				got = append(got, r.rec.GetResourceVersion())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("resourceVersions on the stream (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff([]publish.Key{v5.Key}, reread); diff != "" {
				t.Errorf("re-read keys (-want +got):\n%s", diff)
			}
			if got := metric(t, e.reg, "pilotwire_ingest_publish_conflicts_total", nil); got != 1 {
				t.Errorf("conflicts = %v, want 1", got)
			}
		})
	}
}

func TestFailedPublishIsRetriedUntilItSucceeds(t *testing.T) {
	e := newEnv(t)
	p := e.start(t)
	ctx := testCtx(t)
	if _, err := p.Apply(ctx, publish.Upsert(obj("Service", "default", "a", "1"))); err != nil {
		t.Fatal(err)
	}
	if err := e.js.DeleteStream(ctx, names.ChangesStream()); err != nil {
		t.Fatal(err)
	}
	type out struct {
		res publish.Result
		err error
	}
	done := make(chan out, 1)
	go func() {
		res, err := p.Apply(ctx, publish.Upsert(obj("Service", "default", "a", "2")), publish.Upsert(obj("Service", "default", "b", "1")))
		done <- out{res, err}
	}()
	// Wait until the publisher has failed at least once, then bring the
	// stream back.
	testutil.Eventually(t, "a publish error", func() bool {
		select {
		case o := <-done:
			t.Fatalf("apply returned without a stream: %+v", o)
		default:
		}
		return metric(t, e.reg, "pilotwire_ingest_publish_errors_total", nil) > 0
	})
	if _, err := e.js.CreateStream(ctx, names.ChangesConfig(publishStreamOptions())); err != nil {
		t.Fatal(err)
	}
	var o out
	select {
	case o = <-done:
	case <-ctx.Done():
		t.Fatal("apply did not finish after the stream came back")
	}
	if o.err != nil || o.res.Published != 2 {
		t.Fatalf("apply: %+v, %v", o.res, o.err)
	}
	// The recreated stream starts over: a is added again (its old subject
	// sequence is gone, so its first attempt conflicts and is re-planned
	// after b), b is new.
	got := summary(e.records(t))
	slices.Sort(got)
	if diff := cmp.Diff([]string{"OP_ADD Service default/a", "OP_ADD Service default/b"}, got); diff != "" {
		t.Errorf("records (-want +got):\n%s", diff)
	}
}

func TestApplyStopsWhenContextEnds(t *testing.T) {
	e := newEnv(t)
	p := e.start(t)
	if err := e.js.DeleteStream(testCtx(t), names.ChangesStream()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	cancel()
	if _, err := p.Apply(ctx, publish.Upsert(obj("Service", "default", "a", "1"))); err == nil {
		t.Fatal("apply without a stream and with a cancelled context succeeded")
	}
}

func TestOtherClustersAreNotTouched(t *testing.T) {
	e := newEnv(t)
	px := e.start(t, func(o *publish.Options) { o.Cluster = "east" })
	if _, err := px.Sync(testCtx(t), []publish.Object{obj("Service", "default", "a", "1")}); err != nil {
		t.Fatal(err)
	}
	py := e.start(t, func(o *publish.Options) { o.Cluster = "west" })
	if got := py.Live(); len(got) != 0 {
		t.Fatalf("west sees %v", got)
	}
	res, err := py.Sync(testCtx(t), nil)
	if err != nil || res != (publish.Result{}) {
		t.Fatalf("west sync: %+v, %v", res, err)
	}
	if got := len(e.records(t)); got != 1 {
		t.Errorf("stream holds %d records, want 1", got)
	}
}

func TestStartReadsManyObjects(t *testing.T) {
	e := newEnv(t)
	p1 := e.start(t)
	const n = 3000 // several pull batches
	var desired []publish.Object
	for i := range n {
		desired = append(desired, obj("Service", "default", fmt.Sprintf("s%04d", i), "1"))
	}
	if res, err := p1.Sync(testCtx(t), desired); err != nil || res.Published != n {
		t.Fatalf("sync: %+v, %v", res, err)
	}
	// Two more records on some subjects: only the last per subject counts.
	if _, err := p1.Apply(testCtx(t), publish.Upsert(obj("Service", "default", "s0001", "2")), publish.Delete(desired[2])); err != nil {
		t.Fatal(err)
	}
	p2 := e.start(t)
	if got := len(p2.Live()); got != n-1 {
		t.Fatalf("restarted publisher knows %d live objects, want %d", got, n-1)
	}
	desired[1] = obj("Service", "default", "s0001", "2")
	res, err := p2.Sync(testCtx(t), append(desired[:2:2], desired[3:]...))
	if err != nil || res != (publish.Result{Unchanged: n - 1}) {
		t.Fatalf("sync after restart: %+v, %v", res, err)
	}
}

// TestSyncWithholdsMassDeletes: a Sync that would delete most of the
// cluster (an empty or wrong config dir at start, a cluster re-added empty)
// publishes its adds and updates but none of its deletes, logged and
// counted; individual deletes still flow.
func TestSyncWithholdsMassDeletes(t *testing.T) {
	e := newEnv(t)
	p1 := e.start(t)
	var desired []publish.Object
	for i := range 20 {
		desired = append(desired, obj("Service", "default", fmt.Sprintf("s%02d", i), "1"))
	}
	if _, err := p1.Sync(testCtx(t), desired); err != nil {
		t.Fatal(err)
	}
	p2 := e.start(t)
	// Only one object left, and a new one: 19 of 20 would go.
	res, err := p2.Sync(testCtx(t), []publish.Object{desired[0], obj("Service", "default", "new", "1")})
	if err != nil || res != (publish.Result{Published: 1, Unchanged: 1, Withheld: 19}) {
		t.Fatalf("sync: %+v, %v; want the new object published and 19 deletes withheld", res, err)
	}
	if n := len(e.records(t)); n != 21 {
		t.Errorf("stream holds %d records, want 21", n)
	}
	if got := metric(t, e.reg, "pilotwire_ingest_mass_deletes_withheld_total", nil); got != 1 {
		t.Errorf("mass_deletes_withheld = %v, want 1", got)
	}
	if !strings.Contains(e.log.String(), "withholding its deletes") {
		t.Errorf("no log line for the withheld deletes:\n%s", e.log.String())
	}
	// A small share is not a mass delete.
	keep := append([]publish.Object{obj("Service", "default", "new", "1")}, desired[:15]...)
	if res, err := p2.Sync(testCtx(t), keep); err != nil || res.Published != 5 || res.Withheld != 0 {
		t.Fatalf("sync deleting 5 of 21: %+v, %v", res, err)
	}
	// Nor is a delete of one object.
	if res, err := p2.Apply(testCtx(t), publish.Delete(desired[0])); err != nil || res.Published != 1 {
		t.Fatalf("delete: %+v, %v", res, err)
	}
}

// TestMassDeleteGuardCanBeTurnedOff: threshold 1 lets a Sync delete all.
func TestMassDeleteGuardCanBeTurnedOff(t *testing.T) {
	e := newEnv(t)
	p1 := e.start(t)
	var desired []publish.Object
	for i := range 20 {
		desired = append(desired, obj("Service", "default", fmt.Sprintf("s%02d", i), "1"))
	}
	if _, err := p1.Sync(testCtx(t), desired); err != nil {
		t.Fatal(err)
	}
	p2 := e.start(t, func(o *publish.Options) { o.MassDeleteThreshold = 1 })
	if res, err := p2.Sync(testCtx(t), nil); err != nil || res != (publish.Result{Published: 20}) {
		t.Fatalf("sync: %+v, %v; want 20 deletes", res, err)
	}
}
