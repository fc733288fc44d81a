package publish_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

// TestUndecodableLastRecordDoesNotWedge: a subject whose last record the
// publisher cannot decode (garbage, or another writer version's shape)
// still has a sequence, and the next record must follow it. Before, the
// sequence was dropped with the record, every publish conflicted and was
// re-planned at once, forever, with the publisher's lock held.
func TestUndecodableLastRecordDoesNotWedge(t *testing.T) {
	a := obj("Service", "default", "a", "1")
	subject := names.ChangeSubject(cluster, &pb.ObjectRef{Kind: "Service", Namespace: "default", Name: "a"})
	foreign := func(t *testing.T, e *env) {
		t.Helper()
		// A record from another writer version: it decodes, but has no ref.
		data := []byte{0x0a, 0x03, 'x', 'y', 'z'} // field 1 (cluster) = "xyz"
		if _, err := e.js.PublishMsg(testCtx(t), &nats.Msg{Subject: subject, Data: data}); err != nil {
			t.Fatal(err)
		}
	}
	garbage := func(t *testing.T, e *env) {
		t.Helper()
		if _, err := e.js.PublishMsg(testCtx(t), &nats.Msg{Subject: subject, Data: []byte{0xff, 0xff, 0xff}}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name string
		bad  func(*testing.T, *env)
		// before Start (read by load) or after (met as a conflict)
		afterStart bool
	}{
		{name: "garbage read at start", bad: garbage},
		{name: "foreign read at start", bad: foreign},
		{name: "garbage met as a conflict", bad: garbage, afterStart: true},
		{name: "foreign met as a conflict", bad: foreign, afterStart: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			var p *publish.Publisher
			if tc.afterStart {
				p = e.start(t)
				tc.bad(t, e)
			} else {
				if _, err := e.js.CreateStream(testCtx(t), names.ChangesConfig(publishStreamOptions())); err != nil {
					t.Fatal(err)
				}
				tc.bad(t, e)
				p = e.start(t)
			}
			ctx, cancel := context.WithTimeout(testCtx(t), 5*testutil.ShortTimeout)
			defer cancel()
			res, err := p.Apply(ctx, publish.Upsert(a))
			if err != nil || res.Published != 1 {
				t.Fatalf("apply: %+v, %v (conflicts %v)", res, err, metric(t, e.reg, "pilotwire_ingest_publish_conflicts_total", nil))
			}
			s, err := e.js.Stream(testCtx(t), names.ChangesStream())
			if err != nil {
				t.Fatal(err)
			}
			last, err := s.GetLastMsgForSubject(testCtx(t), subject)
			if err != nil {
				t.Fatal(err)
			}
			var rec pb.ChangeRecord
			if err := proto.Unmarshal(last.Data, &rec); err != nil {
				t.Fatal(err)
			}
			if last.Sequence != 2 || rec.GetOp() != pb.Op_OP_ADD || !bytes.Equal(rec.GetObject(), a.JSON) {
				t.Errorf("last record: seq %d, %v; want seq 2, an ADD of a", last.Sequence, &rec)
			}
			if got := metric(t, e.reg, "pilotwire_ingest_unreadable_records_total", nil); got != 1 {
				t.Errorf("unreadable records = %v, want 1", got)
			}
			if got := metric(t, e.reg, "pilotwire_ingest_publish_conflicts_total", nil); got > 1 {
				t.Errorf("conflicts = %v, want at most 1", got)
			}
		})
	}
}

// TestReplansAreBounded: an object whose subject moves on under every
// re-plan is given up after MaxReplans, logged and counted, and the rest of
// the batch is published.
func TestReplansAreBounded(t *testing.T) {
	e := newEnv(t)
	a, b := obj("Service", "default", "a", "1"), obj("Service", "default", "b", "1")
	subject := names.ChangeSubject(cluster, &pb.ObjectRef{Kind: "Service", Namespace: "default", Name: "a"})
	interfere := func() {
		if _, err := e.js.PublishMsg(testCtx(t), &nats.Msg{Subject: subject, Data: []byte{0xff}}); err != nil {
			t.Error(err)
		}
	}
	p := e.start(t, func(o *publish.Options) {
		o.MaxReplans = 3
		o.Reread = func(k publish.Key) (publish.Change, bool) {
			interfere() // someone writes the subject again, every time
			return publish.Upsert(a), true
		}
	})
	interfere()
	ctx, cancel := context.WithTimeout(testCtx(t), 10*testutil.ShortTimeout)
	defer cancel()
	res, err := p.Apply(ctx, publish.Upsert(a), publish.Upsert(b))
	if err != nil || res != (publish.Result{Published: 1, Rejected: 1}) {
		t.Fatalf("apply: %+v, %v; want b published, a given up", res, err)
	}
	if got := metric(t, e.reg, "pilotwire_ingest_publish_replans_total", nil); got != 3 {
		t.Errorf("replans = %v, want 3", got)
	}
	if got := metric(t, e.reg, "pilotwire_ingest_rejected_records_total", map[string]string{"reason": publish.RejectConflicts}); got != 1 {
		t.Errorf("rejected (conflicts) = %v, want 1", got)
	}
	if !strings.Contains(e.log.String(), "giving the change up") {
		t.Errorf("no log line for the given-up change:\n%s", e.log.String())
	}
}
