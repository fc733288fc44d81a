package debouncer

import (
	"encoding/json"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pilotwire/pilotwire/pkg/debounce"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

func seedChangeRecords() [][]byte {
	slice, _ := json.Marshal(map[string]any{
		"metadata":  map[string]any{"name": "a-1", "namespace": "ns", "labels": map[string]any{"kubernetes.io/service-name": "a"}},
		"ports":     []any{map[string]any{"name": "http", "port": 80}},
		"endpoints": []any{map[string]any{"addresses": []any{"10.1.0.1"}, "targetRef": map[string]any{"kind": "Pod", "name": "a-0", "namespace": "ns"}}},
	})
	pod, _ := json.Marshal(map[string]any{"metadata": map[string]any{"name": "a-0", "namespace": "ns", "labels": map[string]any{"version": "v1"}}})
	var out [][]byte
	for _, r := range []*pb.ChangeRecord{
		{Cluster: "c1", Op: pb.Op_OP_ADD, Object: slice, ObservedAt: timestamppb.Now(),
			Ref: &pb.ObjectRef{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice", Namespace: "ns", Name: "a-1"}},
		{Cluster: "c1", Op: pb.Op_OP_UPDATE, Object: pod, Ref: &pb.ObjectRef{Version: "v1", Kind: "Pod", Namespace: "ns", Name: "a-0"}},
		{Cluster: "c2", Op: pb.Op_OP_DELETE, Ref: &pb.ObjectRef{Version: "v1", Kind: "Service", Namespace: "ns", Name: "a"}},
		{Cluster: "c1", Op: pb.Op_OP_ADD, Object: []byte(`{"spec":{}}`), Ref: &pb.ObjectRef{Group: "networking.istio.io", Kind: "VirtualService", Namespace: "ns", Name: "v"}},
		{Cluster: "c1", Op: pb.Op_OP_ADD, Object: []byte(`{"metadata":{"labels":{"kubernetes.io/service-name":""}},"ports":[{"port":-1}]}`),
			Ref: &pb.ObjectRef{Group: "discovery.k8s.io", Kind: "EndpointSlice", Namespace: "ns", Name: "bad"}},
	} {
		b, _ := proto.Marshal(r)
		out = append(out, b)
	}
	return out
}

// FuzzToEvent decodes change records as the debouncer reads them off the
// CHANGES stream: no input panics; a record that decodes becomes an event
// at its sequence with at least one config key and a reason, whose
// PushRequest covers that sequence; and once every object the records
// named is deleted, the endpoint index holds nothing (no leaked slice,
// service or pod counts).
func FuzzToEvent(f *testing.F) {
	seeds := seedChangeRecords()
	for i := range seeds {
		f.Add(seeds[i], seeds[(i+1)%len(seeds)])
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		idx := newEndpointIndex()
		var refs []*pb.ChangeRecord
		for i, data := range [][]byte{a, b, a} {
			seq := uint64(i + 1)
			ev, err := toEvent(data, seq, idx)
			if err != nil {
				continue // counted and logged by the caller; the stream moves on
			}
			if ev.Seq != seq || len(ev.ConfigKeys) == 0 || ev.Reason == "" {
				t.Fatalf("event %+v from record seq %d", ev, seq)
			}
			d := debounce.New(debounce.Config{})
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			d.Add(ev, t0)
			req, ok := d.Tick(t0.Add(time.Minute))
			if !ok {
				t.Fatalf("event of seq %d not emitted a minute later", seq)
			}
			if cs := toProto(req).GetCovered(); len(cs) != 1 || cs[0].GetFirst() != seq || cs[0].GetLast() != seq {
				t.Fatalf("PushRequest of seq %d covers %v", seq, cs)
			}
			rec := &pb.ChangeRecord{}
			_ = proto.Unmarshal(data, rec)
			refs = append(refs, &pb.ChangeRecord{Cluster: rec.GetCluster(), Op: pb.Op_OP_DELETE, Ref: rec.GetRef()})
		}
		for i, r := range refs {
			data, _ := proto.Marshal(r)
			if _, err := toEvent(data, uint64(10+i), idx); err != nil {
				t.Fatalf("delete of %v: %v", r.GetRef(), err)
			}
		}
		if len(idx.slices) != 0 || len(idx.services) != 0 || len(idx.podUsers) != 0 || len(idx.podLabels) != 0 {
			t.Fatalf("index not empty after every object was deleted: slices %v services %v podUsers %v podLabels %v",
				idx.slices, idx.services, idx.podUsers, idx.podLabels)
		}
	})
}
