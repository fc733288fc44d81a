package ads

import (
	"context"
	"sort"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// pushAll plays the pusher: it orders a push of every connection registered
// by this frontend and waits for every PushDone.
func (f *frontend) pushAll(t testing.TB, through uint64) []*pb.PushDone {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	kv, err := f.js.KeyValue(ctx, f.names.RegistryBucket())
	if err != nil {
		t.Fatal(err)
	}
	lister, err := kv.ListKeysFiltered(ctx, "conn."+f.id+".>")
	if err != nil {
		t.Fatal(err)
	}
	batch := &pb.PushOrderBatch{Pusher: "test"}
	for k := range lister.Keys() {
		conn := k[strings.LastIndex(k, ".")+1:]
		batch.Orders = append(batch.Orders, &pb.PushOrder{ConnId: conn, PushId: uint64(len(batch.Orders) + 1), Full: true, ThroughSeq: through})
	}
	inbox := nats.NewInbox()
	dones := make(chan *nats.Msg, len(batch.Orders))
	sub, err := f.nc.ChanSubscribe(inbox, dones)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	b, _ := proto.Marshal(batch)
	if err := f.nc.PublishMsg(&nats.Msg{Subject: f.names.OrdersSubject(f.id), Reply: inbox, Data: b}); err != nil {
		t.Fatal(err)
	}
	var out []*pb.PushDone
	for range batch.Orders {
		select {
		case m := <-dones:
			d := &pb.PushDone{}
			if err := proto.Unmarshal(m.Data, d); err != nil {
				t.Fatal(err)
			}
			out = append(out, d)
		case <-ctx.Done():
			t.Fatalf("only %d of %d pushes done", len(out), len(batch.Orders))
		}
	}
	return out
}

// waitRegistered polls the registry until n connections of this frontend
// are there.
// waitAcked waits until the frontend has taken the ACK of the clusters
// and load assignments it sent to each of n proxies: until then a push to
// a proxy waits for the ACK and is done as DEFERRED.
func (f *frontend) waitAcked(t testing.TB, n int) {
	t.Helper()
	testutil.Eventually(t, "every proxy's clusters and endpoints ACKed", func() bool {
		var rows []syncStatus
		getJSON(t, f.http+"/debug/syncz", &rows)
		acked := 0
		for _, r := range rows {
			if r.ClusterSent != "" && r.ClusterAcked == r.ClusterSent && r.EndpointSent != "" && r.EndpointAcked == r.EndpointSent {
				acked++
			}
		}
		return acked == n
	})
}

func (f *frontend) waitRegistered(t testing.TB, n int) {
	t.Helper()
	testutil.Eventually(t, "connections registered", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
		defer cancel()
		kv, err := f.js.KeyValue(ctx, f.names.RegistryBucket())
		if err != nil {
			return false
		}
		lister, err := kv.ListKeysFiltered(ctx, "conn."+f.id+".>")
		if err != nil {
			return false
		}
		k := 0
		for range lister.Keys() {
			k++
		}
		return k >= n
	})
}

type deltaClient struct {
	t      testing.TB
	stream grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]
}

func dialDelta(ctx context.Context, t testing.TB, addr string) *deltaClient {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	s, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &deltaClient{t: t, stream: s}
}

func (c *deltaClient) send(r *discovery.DeltaDiscoveryRequest) {
	c.t.Helper()
	r.Node = &core.Node{Id: "sidecar~10.0.0.1~a-0.default~default.svc.cluster.local"}
	if err := c.stream.Send(r); err != nil {
		c.t.Fatal(err)
	}
}

func (c *deltaClient) recv(typeURL string) *discovery.DeltaDiscoveryResponse {
	c.t.Helper()
	r, err := c.stream.Recv()
	if err != nil {
		c.t.Fatalf("recv: %v", err)
	}
	if r.GetTypeUrl() != typeURL {
		c.t.Fatalf("got %s, want %s", r.GetTypeUrl(), typeURL)
	}
	// ACK it.
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: typeURL, ResponseNonce: r.GetNonce()})
	return r
}

func versions(r *discovery.DeltaDiscoveryResponse) map[string]string {
	out := map[string]string{}
	for _, x := range r.GetResources() {
		out[x.GetName()] = x.GetVersion()
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	var k []string
	for n := range m {
		k = append(k, n)
	}
	sort.Strings(k)
	return k
}

// TestDeltaOverGRPC: a delta stream over gRPC, pushed to by an order over
// NATS, and a reconnect to a second frontend of the same mesh presenting
// initial_resource_versions, which is sent only what differs (the protocol
// cases are in testdata/delta.txt).
func TestDeltaOverGRPC(t *testing.T) {
	f := startFrontend(t, func(f *frontend) {
		f.publish(t, pb.Op_OP_ADD, "", "Service", service("default", "a", 80))
		f.publish(t, pb.Op_OP_ADD, "", "Service", service("default", "b", 81))
		f.publish(t, pb.Op_OP_ADD, "discovery.k8s.io", "EndpointSlice", slice("default", "a", 8080, "10.1.0.1"))
	})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	const ca, cb = "outbound|80||a.default.svc.cluster.local", "outbound|81||b.default.svc.cluster.local"

	c := dialDelta(ctx, t, f.addr)
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType})
	cds := c.recv(resource.ClusterType)
	// Every sidecar also gets Istio's passthrough and blackhole clusters.
	if diff := cmp.Diff([]string{"BlackHoleCluster", "InboundPassthroughCluster", "PassthroughCluster", ca, cb}, sortedKeys(versions(cds))); diff != "" {
		t.Fatalf("wildcard CDS (-want +got):\n%s", diff)
	}
	c.send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{ca}})
	eds := c.recv(resource.EndpointType)
	f.waitRegistered(t, 1)
	f.waitAcked(t, 1)

	// An endpoint change: the push sends only the changed load assignment.
	seq := f.publish(t, pb.Op_OP_UPDATE, "discovery.k8s.io", "EndpointSlice", slice("default", "a", 8080, "10.1.0.2"))
	f.waitApplied(t, seq)
	if d := f.pushAll(t, seq); d[0].GetResult() != pb.PushDone_SENT {
		t.Fatalf("push result %v, want SENT", d[0].GetResult())
	}
	eds2 := c.recv(resource.EndpointType)
	if diff := cmp.Diff([]string{ca}, sortedKeys(versions(eds2))); diff != "" {
		t.Errorf("pushed EDS (-want +got):\n%s", diff)
	}

	// Reconnect to a second frontend presenting what the client has: CDS
	// matches, so nothing is sent; EDS has an old version of a, so only a
	// is sent, at the version the first frontend sent.
	f2 := runFrontend(t, f.url, "fe-2", nil)
	c2 := dialDelta(ctx, t, f2.addr)
	c2.send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.ClusterType, InitialResourceVersions: versions(cds)})
	re := c2.recv(resource.ClusterType)
	if len(re.GetResources()) != 0 || len(re.GetRemovedResources()) != 0 {
		t.Errorf("reconnect CDS sent %v removed %v, want nothing", sortedKeys(versions(re)), re.GetRemovedResources())
	}
	c2.send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{ca}, InitialResourceVersions: versions(eds)})
	re2 := c2.recv(resource.EndpointType)
	if !cmp.Equal(versions(re2), versions(eds2)) {
		t.Errorf("reconnect EDS = %v, want the current version %v (same as the first frontend sent)", versions(re2), versions(eds2))
	}
}

// TestVersionsConsistentAcrossFrontends: two frontends of one mesh answer
// the same request with the same version and bytes.
func TestVersionsConsistentAcrossFrontends(t *testing.T) {
	f1 := startFrontend(t, func(f *frontend) {
		f.publish(t, pb.Op_OP_ADD, "", "Service", service("default", "a", 80))
		f.publish(t, pb.Op_OP_ADD, "discovery.k8s.io", "EndpointSlice", slice("default", "a", 8080, "10.1.0.1", "10.1.0.2"))
	})
	f2 := runFrontend(t, f1.url, "fe-2", nil)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	var got []*discovery.DiscoveryResponse
	for _, f := range []*frontend{f1, f2} {
		c := dial(ctx, t, f.addr, sidecar())
		for _, typ := range []string{resource.ClusterType, resource.ListenerType} {
			c.send(&discovery.DiscoveryRequest{TypeUrl: typ})
			got = append(got, c.recv())
		}
	}
	for i := range 2 {
		a, b := got[i], got[i+2]
		if a.GetVersionInfo() != b.GetVersionInfo() {
			t.Errorf("%s versions differ: %s vs %s", a.GetTypeUrl(), a.GetVersionInfo(), b.GetVersionInfo())
		}
		if !cmp.Equal(a.GetResources(), b.GetResources(), cmp.Comparer(proto.Equal)) {
			t.Errorf("%s resources differ between frontends", a.GetTypeUrl())
		}
	}
}
