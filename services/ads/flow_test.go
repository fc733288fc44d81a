package ads

import (
	"context"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestPushesWaitForTheAnswer: while a client has not answered a response,
// pushes of that type are held; its answer brings the latest state in one
// response, whatever the number of changes meanwhile.
func TestPushesWaitForTheAnswer(t *testing.T) {
	f := startFrontend(t, func(f *frontend) {
		f.publish(t, pb.Op_OP_ADD, "", "Service", service("default", "a", 80))
		f.publish(t, pb.Op_OP_ADD, "discovery.k8s.io", "EndpointSlice", slice("default", "a", 8080, "10.1.0.1"))
	})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	const cl = "outbound|80||a.default.svc.cluster.local"
	c := dial(ctx, t, f.addr, sidecar())
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: []string{cl}})
	first := c.recv() // not answered yet
	f.waitRegistered(t, 1)

	var seq uint64
	for i := range 10 {
		seq = f.publish(t, pb.Op_OP_UPDATE, "discovery.k8s.io", "EndpointSlice", slice("default", "a", 8080, "10.1.1."+string(rune('0'+i))))
		f.waitApplied(t, seq)
		for _, d := range f.pushAll(t, seq) {
			if d.GetResult() != pb.PushDone_UNCHANGED {
				t.Fatalf("push %d while unanswered: %v, want nothing sent", i, d.GetResult())
			}
		}
	}
	if got := f.gauge("pilotwire_ads_pushes_deferred_total"); got != 10 {
		t.Errorf("deferred pushes = %v, want 10", got)
	}
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, VersionInfo: first.VersionInfo, ResponseNonce: first.Nonce, ResourceNames: []string{cl}})
	latest := c.recv()
	if got := endpointsOf(t, latest)[cl]; len(got) != 1 || got[0] != "10.1.1.9:8080" {
		t.Fatalf("after the answer got %v, want the latest endpoint only", got)
	}
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, VersionInfo: latest.VersionInfo, ResponseNonce: latest.Nonce, ResourceNames: []string{cl}})
	// Nothing more comes: a must-not-happen check with a short wait.
	got := make(chan *discovery.DiscoveryResponse, 1)
	go func() {
		if r, err := c.stream.Recv(); err == nil {
			got <- r
		}
	}()
	short := time.NewTimer(testutil.ShortTimeout)
	defer short.Stop()
	select {
	case r := <-got:
		t.Fatalf("unexpected extra response %s %s", r.GetTypeUrl(), r.GetVersionInfo())
	case <-short.C:
	}
}

// TestReconnectWithCurrentVersionSendsNothing: a state-of-the-world client
// reconnecting (to another frontend) with the version it already has gets
// no response until something changes.
func TestReconnectWithCurrentVersionSendsNothing(t *testing.T) {
	f := startFrontend(t, func(f *frontend) {
		f.publish(t, pb.Op_OP_ADD, "", "Service", service("default", "a", 80))
	})
	f2 := runFrontend(t, f.url, "fe-2", nil)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	c := dial(ctx, t, f.addr, sidecar())
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
	cds := c.recv()

	c2 := dial(ctx, t, f2.addr, sidecar())
	c2.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: cds.VersionInfo})
	c2.send(&discovery.DiscoveryRequest{TypeUrl: resource.ListenerType})
	if r := c2.recv(); r.GetTypeUrl() != resource.ListenerType {
		t.Fatalf("first response on the new frontend is %s, want LDS (CDS is current)", r.GetTypeUrl())
	}
	// A stale version gets the current one.
	c3 := dial(ctx, t, f2.addr, sidecar())
	c3.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: "stale"})
	if r := c3.recv(); r.GetVersionInfo() != cds.VersionInfo {
		t.Fatalf("stale client got version %s, want %s", r.GetVersionInfo(), cds.VersionInfo)
	}
}
