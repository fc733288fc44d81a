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

// TestConnInfoSharesUnchangedWatches: an info made again shares the views
// of the watches that did not change, shows the change of the one that
// did, and leaves the info published before as it was.
func TestConnInfoSharesUnchangedWatches(t *testing.T) {
	sent := time.Unix(1700000000, 0)
	c := sidecarConn(sent, sent.Add(time.Second))
	before := c.info()
	again := c.info()
	for i := range before.Watches {
		if again.Watches[i] != before.Watches[i] {
			t.Errorf("watch %s made again with nothing changed", before.Watches[i].GetTypeUrl())
		}
	}
	eds := c.watches[resource.EndpointType]
	later := sent.Add(5 * time.Second)
	eds.sentVersion, eds.nonce, eds.sentAt = "v2", "n-2", later
	after := c.info()
	for i, w := range after.Watches {
		changed := w.GetTypeUrl() == resource.EndpointType
		if (w != before.Watches[i]) != changed {
			t.Errorf("watch %s: made again %v, want %v", w.GetTypeUrl(), w != before.Watches[i], changed)
		}
		if !changed {
			continue
		}
		if w.GetSentVersion() != "v2" || w.GetNonce() != "n-2" || !w.GetSentAt().AsTime().Equal(later) || &w.Names[0] != &eds.names[0] {
			t.Errorf("changed watch shows %v", w)
		}
		if old := before.Watches[i]; old.GetSentVersion() != "v1" || old.GetNonce() != "n-"+resource.EndpointType || !old.GetSentAt().AsTime().Equal(sent) {
			t.Errorf("the info published before changed: %v", old)
		}
	}
	eds.ackedAt = later
	if got := c.info().Watches[1]; got == after.Watches[1] || !got.GetAckedAt().AsTime().Equal(later) {
		t.Errorf("an ACK's time alone did not make the watch's view again: %v", got)
	}
}

// BenchmarkConnInfo is a sidecar connection's registry view, made after
// every response and ACK it handles: CDS and LDS wildcard, EDS for 100
// clusters, RDS for one route, each sent and ACKed; made again with
// nothing changed, and after a push (one watch sent a new version).
//
//	go test ./services/ads -run '^$' -bench BenchmarkConnInfo -count 5
func BenchmarkConnInfo(b *testing.B) {
	for _, push := range []bool{false, true} {
		b.Run(fmt.Sprintf("push=%v", push), func(b *testing.B) {
			now := time.Now()
			c := sidecarConn(now, now)
			eds := c.watches[resource.EndpointType]
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if push {
					i++
					eds.nonce, eds.sentAt = nonces[i%len(nonces)], now.Add(time.Duration(i))
				}
				if ci := c.info(); len(ci.GetWatches()) != 4 {
					b.Fatalf("%d watches", len(ci.GetWatches()))
				}
			}
		})
	}
}

var nonces = []string{"n-1", "n-2", "n-3", "n-4"}
