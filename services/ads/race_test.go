package ads

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/pilotwire/pilotwire/pkg/model"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// applyService puts a Service with one http port into store at seq.
func applyService(t testing.TB, store *model.Store, seq uint64, ns, name string, port int) {
	t.Helper()
	b := fmt.Appendf(nil, `{"apiVersion":"v1","kind":"Service","metadata":{"name":%q,"namespace":%q},"spec":{"clusterIP":"10.96.0.9","ports":[{"name":"http","port":%d}]}}`, name, ns, port)
	rec := &pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_UPDATE, Object: b, Uid: name, ResourceVersion: fmt.Sprint(seq),
		Ref: &pb.ObjectRef{Kind: "Service", Namespace: ns, Name: name}}
	if err := store.Apply(rec, seq); err != nil {
		t.Fatal(err)
	}
}

func testNode(name string) *core.Node {
	return &core.Node{Id: "sidecar~10.0.0.1~" + name + ".default~default.svc.cluster.local"}
}

// TestDeltaWildcardWithMissingNamesSharesNothing: wildcard delta
// connections that also name missing resources are each told of their own
// missing name only. Five clusters make a shared generated set of length 5
// and capacity 6, where an append by one connection would land in the
// slot another's append uses (issue 11 #3).
func TestDeltaWildcardWithMissingNamesSharesNothing(t *testing.T) {
	s, store, _, _ := offlineServer(t)
	for i, n := range []string{"a", "b", "c", "d", "e"} {
		applyService(t, store, uint64(i+1), "default", n, 80)
	}
	const conns = 64
	var wg sync.WaitGroup
	removed := make([][]string, conns)
	for i := range conns {
		wg.Go(func() {
			st := &fakeDelta{}
			c := s.newConn(context.Background(), "")
			c.delta = st
			defer c.finish()
			req := &discovery.DeltaDiscoveryRequest{Node: testNode(fmt.Sprint("p", i)), TypeUrl: resource.ClusterType,
				ResourceNamesSubscribe: []string{"*", fmt.Sprintf("missing-%d", i)}}
			if err := c.handleDelta(req); err != nil {
				t.Error(err)
				return
			}
			for _, r := range st.sent {
				removed[i] = append(removed[i], r.GetRemovedResources()...)
			}
		})
	}
	wg.Wait()
	for i := range conns {
		if diff := cmp.Diff([]string{fmt.Sprintf("missing-%d", i)}, removed[i]); diff != "" {
			t.Errorf("connection %d removed (-want +got):\n%s", i, diff)
		}
	}
}

// TestPublishedInfoKeepsItsNames: the view a connection publishes for the
// registry and the debug endpoints is never rewritten by a later change of
// its subscriptions (issue 11 #4).
func TestPublishedInfoKeepsItsNames(t *testing.T) {
	s, store, _, _ := offlineServer(t)
	applyService(t, store, 1, "default", "a", 80)
	st := &fakeDelta{}
	c := s.newConn(context.Background(), "")
	c.delta = st
	defer c.finish()
	send := func(r *discovery.DeltaDiscoveryRequest) {
		t.Helper()
		r.Node, r.TypeUrl = testNode("p"), resource.EndpointType
		if err := c.handleDelta(r); err != nil {
			t.Fatal(err)
		}
	}
	send(&discovery.DeltaDiscoveryRequest{ResourceNamesSubscribe: []string{"a", "b", "c"}})
	ci := c.published.Load()
	before := slices.Clone(ci.GetWatches()[0].GetNames())
	// A reader (the registry's flush, /debug/syncz) holds ci meanwhile.
	done := make(chan []string)
	go func() { done <- slices.Clone(ci.GetWatches()[0].GetNames()) }()
	send(&discovery.DeltaDiscoveryRequest{ResponseNonce: st.sent[0].GetNonce(), ResourceNamesUnsubscribe: []string{"a"}})
	read := <-done
	if diff := cmp.Diff([]string{"a", "b", "c"}, before); diff != "" {
		t.Fatalf("published names (-want +got):\n%s", diff)
	}
	if got := ci.GetWatches()[0].GetNames(); !slices.Equal(got, before) || !slices.Equal(read, before) {
		t.Errorf("published names became %v (read concurrently: %v), want %v kept", got, read, before)
	}
	if got := c.published.Load().GetWatches()[0].GetNames(); !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("newly published names %v, want [b c]", got)
	}
}
