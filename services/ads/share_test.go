package ads

import (
	"context"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/xdsgen"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestGenerateOnceSendMany: proxies that get identical resources share one
// marshalled copy per resource version, whatever their number.
// namesOf returns the resource names an ACK of r re-requests (EDS only).
func namesOf(r *discovery.DiscoveryResponse) []string {
	if r.GetTypeUrl() != resource.EndpointType {
		return nil
	}
	return names(r)
}

func TestGenerateOnceSendMany(t *testing.T) {
	f := startFrontend(t, func(f *frontend) {
		for _, n := range []string{"a", "b", "c"} {
			f.publish(t, pb.Op_OP_ADD, "", "Service", service("default", n, 80))
			f.publish(t, pb.Op_OP_ADD, "discovery.k8s.io", "EndpointSlice", slice("default", n, 8080, "10.1.0.1"))
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	const proxies = 40
	before := xdsgen.Marshals()
	var clients []*client
	for range proxies {
		c := dial(ctx, t, f.addr, sidecar())
		c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
		c.send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: []string{
			"outbound|80||a.default.svc.cluster.local", "outbound|80||b.default.svc.cluster.local", "outbound|80||c.default.svc.cluster.local"}})
		clients = append(clients, c)
	}
	distinct := map[string]bool{} // type and name of every resource sent
	for _, c := range clients {
		for range 2 {
			r := c.recv()
			for _, n := range names(r) {
				distinct[r.GetTypeUrl()+" "+n] = true
			}
			c.send(&discovery.DiscoveryRequest{TypeUrl: r.TypeUrl, VersionInfo: r.VersionInfo, ResponseNonce: r.Nonce, ResourceNames: namesOf(r)})
		}
	}
	// The clusters (the 3 services' and the sidecar's fixed ones) and the 3
	// load assignments, once each, for 40 proxies. Fewer when another test
	// of this process marshalled the same resource before.
	if len(distinct) < 6 {
		t.Fatalf("the proxies were sent %d resources, want at least the 3 clusters and 3 load assignments", len(distinct))
	}
	if got := xdsgen.Marshals() - before; got > uint64(len(distinct)) {
		t.Errorf("%d marshals for %d proxies, want at most %d (one per resource)", got, proxies, len(distinct))
	}
	f.waitRegistered(t, proxies)
	f.waitAcked(t, proxies)

	// One endpoint change pushed to all: one load assignment re-marshalled.
	seq := f.publish(t, pb.Op_OP_UPDATE, "discovery.k8s.io", "EndpointSlice", slice("default", "a", 8080, "10.1.0.2"))
	f.waitApplied(t, seq)
	before = xdsgen.Marshals()
	for _, d := range f.pushAll(t, seq) {
		if d.GetResult() != pb.PushDone_SENT {
			t.Fatalf("push result %v, want SENT", d.GetResult())
		}
	}
	if got := xdsgen.Marshals() - before; got != 1 {
		t.Errorf("%d marshals to push one changed load assignment to %d proxies, want 1", got, proxies)
	}
	// Each proxy is sent only the changed load assignment (incremental EDS
	// in state of the world), not all three.
	for i, c := range clients {
		r := c.recv()
		if r.GetTypeUrl() != resource.EndpointType || len(r.GetResources()) != 1 {
			t.Fatalf("proxy %d got %s with %d resources, want EDS with only the changed one", i, r.GetTypeUrl(), len(r.GetResources()))
		}
	}
}
