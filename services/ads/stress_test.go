package ads

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestStressConcurrentClients runs 200 state-of-the-world and delta
// connections on one frontend core at once, each subscribing,
// unsubscribing, ACKing and NACKing and being pushed to, while the mesh
// changes and readers take the published views (as the registry flush and
// the debug endpoints do). Under -race it finds any state shared across
// connections; each connection also checks what it was sent.
func TestStressConcurrentClients(t *testing.T) {
	const (
		clients  = 200
		steps    = 40
		services = 12
	)
	s, store, dones, _ := offlineServer(t)
	cluster := func(i int) string { return fmt.Sprintf("outbound|80||s%d.default.svc.cluster.local", i) }
	var seq uint64
	for i := range services {
		seq++
		applyService(t, store, seq, "default", fmt.Sprint("s", i), 80)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var bg sync.WaitGroup
	// The mesh changes: services come and go (one applier, as the follower).
	bg.Go(func() {
		r := rand.New(rand.NewPCG(1, 2))
		for ctx.Err() == nil {
			i := r.IntN(services + 4) // some names never exist
			seq++
			if r.IntN(3) == 0 {
				rec := &pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_DELETE, Uid: fmt.Sprint("s", i),
					Ref: &pb.ObjectRef{Kind: "Service", Namespace: "default", Name: fmt.Sprint("s", i)}}
				if err := store.Apply(rec, seq); err != nil {
					t.Error(err)
				}
				continue
			}
			applyService(t, store, seq, "default", fmt.Sprint("s", i), 80+r.IntN(2))
		}
	})
	// Readers of the published views.
	bg.Go(func() {
		for ctx.Err() == nil {
			for _, ci := range s.connInfos() {
				for _, w := range ci.GetWatches() {
					_ = slices.Clone(w.GetNames())
				}
			}
			for _, ci := range takeRegistry(s) {
				_ = fmt.Sprint(ci.GetWatches())
			}
		}
	})

	var sent atomic.Int64
	var wg sync.WaitGroup
	for n := range clients {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(n), 7))
			delta := n%2 == 1
			c := s.newConn(context.Background(), "")
			defer c.finish()
			sotw, dst := &fakeSotW{}, &fakeDelta{}
			if delta {
				c.delta = dst
			} else {
				c.sotw = sotw
			}
			node := testNode(fmt.Sprint("p", n))
			types := []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType}
			names := map[string][]string{}
			last := map[string]string{} // type -> last nonce
			asked := map[string]bool{}  // delta: every name subscribed to
			has := map[string]bool{}    // delta: what the client holds (type|name)
			var pushID uint64
			for range steps {
				t1 := types[r.IntN(len(types))]
				var pick []string
				for range r.IntN(4) {
					pick = append(pick, cluster(r.IntN(services+2)))
				}
				if t1 == resource.RouteType {
					pick = []string{"80", "81"}[:r.IntN(3)]
				}
				if t1 == resource.ClusterType && r.IntN(2) == 0 {
					pick = append(pick, "*")
				}
				var err error
				switch op := r.IntN(5); {
				case op == 4:
					pushID++
					if c.deliver(orderRef{order: &pb.PushOrder{ConnId: c.id, PushId: pushID, ThroughSeq: 0}}) {
						err = c.handleOrders(c.takeOrders())
					}
				case delta:
					req := &discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: t1, ResponseNonce: last[t1]}
					switch op {
					case 0:
						req.ResourceNamesSubscribe = pick
						for _, p := range pick {
							asked[t1+"|"+p] = true
						}
					case 1:
						req.ResourceNamesUnsubscribe = pick
					case 2:
						req.ErrorDetail = &rpcstatus.Status{Code: 3, Message: "no"}
					}
					err = c.handleDelta(req)
				default:
					req := &discovery.DiscoveryRequest{Node: node, TypeUrl: t1, ResponseNonce: last[t1], ResourceNames: names[t1]}
					switch op {
					case 0:
						req.ResourceNames = append(slices.Clone(names[t1]), pick...)
					case 1:
						req.ResourceNames = pick
					case 2:
						req.ErrorDetail = &rpcstatus.Status{Code: 3, Message: "no"}
					}
					names[t1] = req.ResourceNames
					err = c.handleRequest(req)
				}
				if err != nil {
					t.Errorf("client %d: %v", n, err)
					return
				}
				seen := map[string]bool{}
				for _, resp := range sotw.take() {
					if seen[resp.GetNonce()] || resp.GetNonce() == "" {
						t.Errorf("client %d: nonce %q reused or empty", n, resp.GetNonce())
					}
					seen[resp.GetNonce()] = true
					last[resp.GetTypeUrl()] = resp.GetNonce()
					sent.Add(1)
				}
				for _, resp := range dst.take() {
					t2 := resp.GetTypeUrl()
					for _, rm := range resp.GetRemovedResources() {
						// Only what the client holds or asked for, never
						// another connection's names.
						if !has[t2+"|"+rm] && !asked[t2+"|"+rm] {
							t.Errorf("client %d: told %s removed, never held or asked for", n, rm)
						}
						delete(has, t2+"|"+rm)
					}
					for _, x := range resp.GetResources() {
						has[t2+"|"+x.GetName()] = true
					}
					last[resp.GetTypeUrl()] = resp.GetNonce()
					sent.Add(1)
				}
			}
		})
	}
	wg.Wait()
	cancel()
	bg.Wait()
	dones.take()
	if sent.Load() == 0 {
		t.Fatal("no responses sent")
	}
}
