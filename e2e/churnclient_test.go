package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// xdsTypes in Envoy's order.
var xdsTypes = []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType}

// childType is the type whose subscription a parent type's resources name.
var childType = map[string]string{resource.ClusterType: resource.EndpointType, resource.ListenerType: resource.RouteType}

// holding is what a client holds: type -> resource name -> content hash
// (sha256 of the resource's bytes as sent).
type holding map[string]map[string]string

func (h holding) equal(o holding) bool {
	return maps.EqualFunc(h, o, func(a, b map[string]string) bool { return maps.Equal(a, b) })
}

func contentHash(a *anypb.Any) string {
	h := sha256.Sum256(a.GetValue())
	return hex.EncodeToString(h[:])
}

// refsOf lists what an Envoy subscribes to after receiving m: the load
// assignment of an EDS cluster, the route configurations a listener's
// HTTP connection managers name.
func refsOf(m proto.Message) []string {
	switch msg := m.(type) {
	case *cluster.Cluster:
		if msg.GetType() != cluster.Cluster_EDS {
			return nil
		}
		if n := msg.GetEdsClusterConfig().GetServiceName(); n != "" {
			return []string{n}
		}
		return []string{msg.GetName()}
	case *listener.Listener:
		var out []string
		configs := []*anypb.Any{msg.GetApiListener().GetApiListener()}
		for _, fc := range append(slices.Clip(msg.GetFilterChains()), msg.GetDefaultFilterChain()) {
			for _, f := range fc.GetFilters() {
				configs = append(configs, f.GetTypedConfig())
			}
		}
		for _, a := range configs {
			h := &hcm.HttpConnectionManager{}
			if a != nil && a.MessageIs(h) && a.UnmarshalTo(h) == nil && h.GetRds().GetRouteConfigName() != "" {
				out = append(out, h.GetRds().GetRouteConfigName())
			}
		}
		return out
	}
	return nil
}

func decodeAny(a *anypb.Any) (proto.Message, error) {
	m, err := a.UnmarshalNew()
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", a.GetTypeUrl(), err)
	}
	return m, nil
}

// meshClient is a raw ADS client that behaves as an Envoy sidecar: CDS and
// LDS wildcards, EDS and RDS subscribed to what the clusters and listeners
// name (re-subscribed as they change), every response ACKed. It speaks
// state of the world or delta, and holds the content hash of every
// resource it has.
type meshClient struct {
	t     *testing.T
	node  *core.Node
	delta bool

	mu        sync.Mutex
	have      holding
	refs      map[string]map[string][]string // parent type -> resource -> child names
	subs      map[string][]string            // EDS and RDS: names subscribed, sorted
	responses int
	err       error // the stream's end, if not by the test
}

func startMeshClient(ctx context.Context, t *testing.T, addr, nodeID string, delta bool) *meshClient {
	t.Helper()
	c := &meshClient{t: t, node: &core.Node{Id: nodeID}, delta: delta, have: holding{},
		refs: map[string]map[string][]string{}, subs: map[string][]string{}}
	for _, ty := range xdsTypes {
		c.have[ty] = map[string]string{}
		c.refs[ty] = map[string][]string{}
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); cc.Close(); wg.Wait() })
	ads := discovery.NewAggregatedDiscoveryServiceClient(cc)
	wg.Add(1)
	if delta {
		stream, err := ads.DeltaAggregatedResources(ctx)
		if err != nil {
			t.Fatal(err)
		}
		go func() { defer wg.Done(); c.setErr(ctx, c.runDelta(stream)) }()
		return c
	}
	stream, err := ads.StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	go func() { defer wg.Done(); c.setErr(ctx, c.runSotW(stream)) }()
	return c
}

func (c *meshClient) setErr(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
}

// resubscribe recomputes the subscription of parent's child type and
// reports it when it changed (with the names added and removed), dropping
// what the client no longer subscribes to. Called with mu held.
func (c *meshClient) resubscribe(parent string) (child string, names, added, removed []string, changed bool) {
	child = childType[parent]
	if child == "" {
		return "", nil, nil, nil, false
	}
	var want []string
	for _, ns := range c.refs[parent] {
		want = append(want, ns...)
	}
	slices.Sort(want)
	want = slices.Compact(want)
	old := c.subs[child]
	if slices.Equal(old, want) {
		return child, want, nil, nil, false
	}
	for _, n := range want {
		if _, ok := slices.BinarySearch(old, n); !ok {
			added = append(added, n)
		}
	}
	for _, n := range old {
		if _, ok := slices.BinarySearch(want, n); !ok {
			removed = append(removed, n)
			delete(c.have[child], n)
		}
	}
	c.subs[child] = want
	return child, want, added, removed, true
}

// store records resource a of type ty. Called with mu held.
func (c *meshClient) store(ty, name string, a *anypb.Any) error {
	c.have[ty][name] = contentHash(a)
	if childType[ty] == "" {
		return nil
	}
	m, err := decodeAny(a)
	if err != nil {
		return err
	}
	c.refs[ty][name] = refsOf(m)
	return nil
}

func (c *meshClient) runSotW(stream grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse]) error {
	send := func(r *discovery.DiscoveryRequest) error { r.Node = c.node; return stream.Send(r) }
	for _, ty := range []string{resource.ClusterType, resource.ListenerType} {
		if err := send(&discovery.DiscoveryRequest{TypeUrl: ty}); err != nil {
			return err
		}
	}
	last := map[string]*discovery.DiscoveryResponse{}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		ty := resp.GetTypeUrl()
		last[ty] = resp
		c.mu.Lock()
		c.responses++
		if _, full := childType[ty]; full {
			// CDS and LDS carry the whole set.
			clear(c.have[ty])
			clear(c.refs[ty])
		}
		for _, a := range resp.GetResources() {
			m, err := decodeAny(a)
			if err != nil {
				c.mu.Unlock()
				return err
			}
			if err := c.store(ty, nameOf(m), a); err != nil {
				c.mu.Unlock()
				return err
			}
		}
		child, childNames, _, _, changed := c.resubscribe(ty)
		ackNames := c.subs[ty]
		c.mu.Unlock()
		if err := send(&discovery.DiscoveryRequest{TypeUrl: ty, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(), ResourceNames: ackNames}); err != nil {
			return err
		}
		if changed {
			req := &discovery.DiscoveryRequest{TypeUrl: child, ResourceNames: childNames}
			if l := last[child]; l != nil {
				req.VersionInfo, req.ResponseNonce = l.GetVersionInfo(), l.GetNonce()
			}
			if err := send(req); err != nil {
				return err
			}
		}
	}
}

func (c *meshClient) runDelta(stream grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]) error {
	send := func(r *discovery.DeltaDiscoveryRequest) error { r.Node = c.node; return stream.Send(r) }
	for _, ty := range []string{resource.ClusterType, resource.ListenerType} {
		if err := send(&discovery.DeltaDiscoveryRequest{TypeUrl: ty}); err != nil {
			return err
		}
	}
	for {
		resp, err := stream.Recv()
		if err != nil {
			return err
		}
		ty := resp.GetTypeUrl()
		c.mu.Lock()
		c.responses++
		for _, n := range resp.GetRemovedResources() {
			delete(c.have[ty], n)
			delete(c.refs[ty], n)
		}
		for _, r := range resp.GetResources() {
			if err := c.store(ty, r.GetName(), r.GetResource()); err != nil {
				c.mu.Unlock()
				return err
			}
		}
		child, _, added, removed, changed := c.resubscribe(ty)
		c.mu.Unlock()
		if err := send(&discovery.DeltaDiscoveryRequest{TypeUrl: ty, ResponseNonce: resp.GetNonce()}); err != nil {
			return err
		}
		if changed {
			if err := send(&discovery.DeltaDiscoveryRequest{TypeUrl: child, ResourceNamesSubscribe: added, ResourceNamesUnsubscribe: removed}); err != nil {
				return err
			}
		}
	}
}

func nameOf(m proto.Message) string {
	if n, ok := m.(interface{ GetName() string }); ok && n.GetName() != "" {
		return n.GetName()
	}
	if n, ok := m.(interface{ GetClusterName() string }); ok {
		return n.GetClusterName()
	}
	return ""
}

// state returns a copy of what the client holds, the responses it got and
// the error that ended its stream.
func (c *meshClient) state() (holding, int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := holding{}
	for ty, m := range c.have {
		out[ty] = maps.Clone(m)
	}
	return out, c.responses, c.err
}

func (c *meshClient) responseCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.responses
}
