package debouncer

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/debounce"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

func sliceRecord(t *testing.T, op pb.Op, name, svc string, ports ...int32) []byte {
	t.Helper()
	var ps []any
	for _, p := range ports {
		ps = append(ps, map[string]any{"name": "http", "port": p})
	}
	obj, _ := json.Marshal(map[string]any{
		"metadata": map[string]any{"name": name, "namespace": "ns", "labels": map[string]any{"kubernetes.io/service-name": svc}},
		"ports":    ps,
	})
	b, _ := proto.Marshal(&pb.ChangeRecord{Cluster: "c1", Op: op, Object: obj,
		Ref: &pb.ObjectRef{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice", Namespace: "ns", Name: name}})
	return b
}

// TestEndpointChangesFullWhenIstioWouldBe: a service's first endpoints,
// changed ports and the last slice's removal are full pushes; other
// endpoint changes are incremental and keyed by the service.
func TestEndpointChangesFullWhenIstioWouldBe(t *testing.T) {
	idx := newEndpointIndex()
	steps := []struct {
		name string
		rec  []byte
		full bool
	}{
		{name: "first slice of a", rec: sliceRecord(t, pb.Op_OP_ADD, "a-1", "a", 80), full: true},
		{name: "endpoints of a change", rec: sliceRecord(t, pb.Op_OP_UPDATE, "a-1", "a", 80), full: false},
		{name: "second slice of a", rec: sliceRecord(t, pb.Op_OP_ADD, "a-2", "a", 80), full: false},
		{name: "ports of a-1 change", rec: sliceRecord(t, pb.Op_OP_UPDATE, "a-1", "a", 81), full: true},
		{name: "one of two slices deleted", rec: sliceRecord(t, pb.Op_OP_DELETE, "a-2", "a", 80), full: false},
		{name: "last slice deleted", rec: sliceRecord(t, pb.Op_OP_DELETE, "a-1", "a", 81), full: true},
		{name: "a's endpoints come back", rec: sliceRecord(t, pb.Op_OP_ADD, "a-1", "a", 81), full: true},
	}
	for i, st := range steps {
		ev, err := toEvent(st.rec, uint64(i+1), idx)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if ev.Full != st.full {
			t.Errorf("%s: full = %v, want %v", st.name, ev.Full, st.full)
		}
		want := []debounce.ConfigKey{{Kind: "Service", Namespace: "ns", Name: "a", Cluster: "c1"}}
		if diff := cmp.Diff(want, ev.ConfigKeys); diff != "" {
			t.Errorf("%s: keys (-want +got):\n%s", st.name, diff)
		}
		if ev.Reason != ReasonEndpoint {
			t.Errorf("%s: reason %q", st.name, ev.Reason)
		}
	}
}

func TestToEventKinds(t *testing.T) {
	tests := []struct {
		name   string
		ref    *pb.ObjectRef
		full   bool
		reason string
	}{
		{name: "service", ref: &pb.ObjectRef{Kind: "Service", Namespace: "ns", Name: "a"}, full: true, reason: ReasonService},
		{name: "pod", ref: &pb.ObjectRef{Kind: "Pod", Namespace: "ns", Name: "p"}, full: false, reason: ReasonProxy},
		{name: "node", ref: &pb.ObjectRef{Kind: "Node", Name: "n"}, full: false, reason: ReasonProxy},
		{name: "namespace", ref: &pb.ObjectRef{Kind: "Namespace", Name: "ns"}, full: true, reason: ReasonProxy},
		{name: "istio config", ref: &pb.ObjectRef{Group: "networking.istio.io", Kind: "VirtualService", Namespace: "ns", Name: "v"}, full: true, reason: ReasonConfig},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b, _ := proto.Marshal(&pb.ChangeRecord{Cluster: "c1", Ref: tc.ref, Op: pb.Op_OP_ADD})
			ev, err := toEvent(b, 7, newEndpointIndex())
			if err != nil {
				t.Fatal(err)
			}
			if ev.Full != tc.full || ev.Reason != tc.reason || ev.Seq != 7 {
				t.Errorf("event = %+v, want full=%v reason=%s", ev, tc.full, tc.reason)
			}
		})
	}
	if _, err := toEvent([]byte{0xff, 0xff}, 1, newEndpointIndex()); err == nil {
		t.Error("garbage record decoded without error")
	}
}

func TestRanges(t *testing.T) {
	got := ranges([]uint64{1, 2, 3, 5, 7, 8})
	want := []*pb.SeqRange{{First: 1, Last: 3}, {First: 5, Last: 5}, {First: 7, Last: 8}}
	if diff := cmp.Diff(want, got, cmp.Comparer(proto.Equal)); diff != "" {
		t.Errorf("ranges (-want +got):\n%s", diff)
	}
	for _, s := range []uint64{1, 3, 5, 8} {
		if !covers(got, s) {
			t.Errorf("covers(%d) = false", s)
		}
	}
	for _, s := range []uint64{4, 6, 9} {
		if covers(got, s) {
			t.Errorf("covers(%d) = true", s)
		}
	}
}

// TestPodLabelChangeIsEndpointPush: a pod label change becomes an
// endpoint-only push keyed by the services whose slices name the pod, so
// that the pusher sends it to the connections watching their load
// assignments; a pod update that keeps its labels reaches no one.
func TestPodLabelChangeIsEndpointPush(t *testing.T) {
	idx := newEndpointIndex()
	rec := func(ref *pb.ObjectRef, obj string) []byte {
		b, _ := proto.Marshal(&pb.ChangeRecord{Cluster: "c1", Ref: ref, Op: pb.Op_OP_UPDATE, Object: []byte(obj)})
		return b
	}
	sliceRef := &pb.ObjectRef{Group: "discovery.k8s.io", Kind: "EndpointSlice", Namespace: "ns", Name: "web-abc"}
	if _, err := toEvent(rec(sliceRef, `{"metadata":{"labels":{"kubernetes.io/service-name":"web"}},"endpoints":[{"addresses":["10.0.0.1"],"targetRef":{"kind":"Pod","name":"web-1"}}]}`), 1, idx); err != nil {
		t.Fatal(err)
	}
	podRef := &pb.ObjectRef{Kind: "Pod", Namespace: "ns", Name: "web-1"}
	webKey := debounce.ConfigKey{Kind: "Service", Namespace: "ns", Name: "web", Cluster: "c1"}
	podKey := debounce.ConfigKey{Kind: "Pod", Namespace: "ns", Name: "web-1", Cluster: "c1"}
	for i, st := range []struct {
		labels string
		keys   []debounce.ConfigKey
		reason string
	}{
		{labels: `{"version":"v1"}`, keys: []debounce.ConfigKey{podKey, webKey}, reason: ReasonEndpoint}, // first seen
		{labels: `{"version":"v1"}`, keys: []debounce.ConfigKey{podKey}, reason: ReasonProxy},
		{labels: `{"version":"v2"}`, keys: []debounce.ConfigKey{podKey, webKey}, reason: ReasonEndpoint},
	} {
		ev, err := toEvent(rec(podRef, `{"metadata":{"labels":`+st.labels+`}}`), uint64(2+i), idx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Full || ev.Reason != st.reason || !slices.Equal(ev.ConfigKeys, st.keys) {
			t.Errorf("step %d: event %+v, want keys %v reason %s", i, ev, st.keys, st.reason)
		}
	}
}

// TestNodeLocalityChangeIsEndpointPush: a Node's topology labels give the
// locality of the endpoints on it, so a change of them is an endpoint push
// keyed by the services with endpoints on the node (by the slices'
// nodeName); a Node update that keeps them reaches no one.
func TestNodeLocalityChangeIsEndpointPush(t *testing.T) {
	idx := newEndpointIndex()
	rec := func(ref *pb.ObjectRef, obj string) []byte {
		b, _ := proto.Marshal(&pb.ChangeRecord{Cluster: "c1", Ref: ref, Op: pb.Op_OP_UPDATE, Object: []byte(obj)})
		return b
	}
	sliceRef := &pb.ObjectRef{Group: "discovery.k8s.io", Kind: "EndpointSlice", Namespace: "ns", Name: "web-abc"}
	if _, err := toEvent(rec(sliceRef, `{"metadata":{"labels":{"kubernetes.io/service-name":"web"}},"endpoints":[{"addresses":["10.0.0.1"],"nodeName":"n1"}]}`), 1, idx); err != nil {
		t.Fatal(err)
	}
	nodeRef := &pb.ObjectRef{Kind: "Node", Name: "n1"}
	webKey := debounce.ConfigKey{Kind: "Service", Namespace: "ns", Name: "web", Cluster: "c1"}
	nodeKey := debounce.ConfigKey{Kind: "Node", Name: "n1", Cluster: "c1"}
	for i, st := range []struct {
		labels string
		keys   []debounce.ConfigKey
		reason string
	}{
		{labels: `{"topology.kubernetes.io/zone":"a"}`, keys: []debounce.ConfigKey{nodeKey, webKey}, reason: ReasonEndpoint}, // first seen
		{labels: `{"topology.kubernetes.io/zone":"a","kubernetes.io/arch":"amd64"}`, keys: []debounce.ConfigKey{nodeKey}, reason: ReasonProxy},
		{labels: `{"topology.kubernetes.io/zone":"b"}`, keys: []debounce.ConfigKey{nodeKey, webKey}, reason: ReasonEndpoint},
	} {
		ev, err := toEvent(rec(nodeRef, `{"metadata":{"labels":`+st.labels+`}}`), uint64(2+i), idx)
		if err != nil {
			t.Fatal(err)
		}
		if ev.Full || ev.Reason != st.reason || !slices.Equal(ev.ConfigKeys, st.keys) {
			t.Errorf("step %d: event %+v, want keys %v reason %s", i, ev, st.keys, st.reason)
		}
	}
}
