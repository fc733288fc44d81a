package ads

import (
	"fmt"
	"testing"
	"time"

	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// sidecarConn is a sidecar connection with CDS and LDS wildcard, EDS for
// 100 clusters and RDS for one route, each sent and ACKed at sent and
// acked (RDS: sent, not ACKed yet).
func sidecarConn(sent, acked time.Time) *conn {
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("outbound|80||svc-%03d.default.svc.cluster.local", i)
	}
	c := &conn{
		s:         &Server{id: "fe-1"},
		id:        "fe-1-c1",
		proxy:     &proxy{ID: "sidecar~10.0.0.1~a.default~default.svc.cluster.local", Namespace: "default", Type: "sidecar", Generator: "envoy"},
		connected: sent.Add(-time.Second),
		watches:   map[string]*watch{},
	}
	for _, t := range []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType} {
		w := &watch{typeURL: t, ackedVersion: "v1", sentVersion: "v1", nonce: "n-" + t, sentAt: sent, ackedAt: acked}
		switch t {
		case resource.EndpointType:
			w.names = names
		case resource.RouteType:
			w.names = []string{"80"}
			w.ackedVersion, w.ackedAt = "", time.Time{}
		default:
			w.wildcard = true
		}
		c.watches[t] = w
	}
	return c
}

// TestConnInfo: the registry view holds each watch in push order, with
// its times as the watch has them (an unset time stays unset).
func TestConnInfo(t *testing.T) {
	sent := time.Unix(1700000000, 123456789)
	acked := sent.Add(1500 * time.Millisecond)
	c := sidecarConn(sent, acked)
	want := &pb.ConnectionInfo{
		ConnId: "fe-1-c1", Frontend: "fe-1", NodeId: c.proxy.ID, Namespace: "default", ProxyType: "sidecar", Generator: "envoy",
		ConnectedAt: timestamppb.New(c.connected),
	}
	for _, typ := range pushOrder {
		w := c.watches[typ]
		pw := &pb.Watch{TypeUrl: typ, Wildcard: w.wildcard, Names: w.names, AckedVersion: w.ackedVersion, SentVersion: w.sentVersion, Nonce: w.nonce, SentAt: timestamppb.New(sent)}
		if !w.ackedAt.IsZero() {
			pw.AckedAt = timestamppb.New(acked)
		}
		want.Watches = append(want.Watches, pw)
	}
	if diff := cmp.Diff(want, c.info(), protocmp.Transform()); diff != "" {
		t.Fatalf("info (-want +got):\n%s", diff)
	}
}

// BenchmarkConnInfo is a sidecar connection's registry view, made after
// every response and ACK it handles: CDS and LDS wildcard, EDS for 100
// clusters, RDS for one route, each sent and ACKed.
//
//	go test ./services/ads -run '^$' -bench BenchmarkConnInfo -count 5
func BenchmarkConnInfo(b *testing.B) {
	now := time.Now()
	c := sidecarConn(now, now)
	b.ReportAllocs()
	for b.Loop() {
		if ci := c.info(); len(ci.GetWatches()) != 4 {
			b.Fatalf("%d watches", len(ci.GetWatches()))
		}
	}
}
