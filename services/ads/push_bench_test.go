package ads

import (
	"context"
	"fmt"
	"strings"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// BenchmarkPushEndpointChange measures one endpoint change pushed to 300
// state-of-the-world sidecars watching every cluster of a 100x10 mesh: the
// frontend's side of a push, from the order to every PushDone.
func BenchmarkPushEndpointChange(b *testing.B) {
	const services, proxies = 100, 300
	f := startFrontend(b, meshOf(b, services))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clusters := clusterNames(services)
	for range proxies {
		c := dial(ctx, b, f.addr, sidecar())
		c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
		c.send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: clusters})
		go func() { // an Envoy: ACK everything
			for {
				r, err := c.stream.Recv()
				if err != nil {
					return
				}
				var names []string
				if r.GetTypeUrl() == resource.EndpointType {
					names = clusters
				}
				if c.stream.Send(&discovery.DiscoveryRequest{Node: c.node, TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce(), ResourceNames: names}) != nil {
					return
				}
			}
		}()
	}
	f.waitRegistered(b, proxies)
	conns := f.connIDs(b)
	inbox := nats.NewInbox()
	dones := make(chan *nats.Msg, proxies)
	sub, err := f.nc.ChanSubscribe(inbox, dones)
	if err != nil {
		b.Fatal(err)
	}
	defer sub.Unsubscribe()

	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		seq := f.publish(b, pb.Op_OP_UPDATE, "discovery.k8s.io", "EndpointSlice", slice("default", "s007", 8080, fmt.Sprintf("10.200.%d.%d", i/250, i%250+1)))
		f.waitApplied(b, seq)
		batch := &pb.PushOrderBatch{Pusher: "bench"}
		for j, id := range conns {
			batch.Orders = append(batch.Orders, &pb.PushOrder{ConnId: id, PushId: uint64(j + 1), ThroughSeq: seq})
		}
		data, _ := proto.Marshal(batch)
		b.StartTimer()
		if err := f.nc.PublishMsg(&nats.Msg{Subject: f.names.OrdersSubject(f.id), Reply: inbox, Data: data}); err != nil {
			b.Fatal(err)
		}
		for range conns {
			<-dones
		}
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N*proxies), "µs/proxy")
}

// connIDs lists the connections this frontend registered.
func (f *frontend) connIDs(t testing.TB) []string {
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
	var ids []string
	for k := range lister.Keys() {
		ids = append(ids, k[strings.LastIndex(k, ".")+1:])
	}
	return ids
}
