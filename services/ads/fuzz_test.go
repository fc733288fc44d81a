package ads

import (
	"context"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
)

func seedRequests() [][]byte {
	node := &core.Node{Id: "sidecar~10.0.0.1~a-0.default~default.svc.cluster.local"}
	reqs := []proto.Message{
		&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType},
		&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNames: []string{"outbound|80||a.default.svc.cluster.local", "*"}},
		&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ListenerType, ResponseNonce: "fuzz-1", VersionInfo: "v",
			ErrorDetail: &rpcstatus.Status{Code: 3, Message: "nack"}},
		&discovery.DiscoveryRequest{TypeUrl: "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"},
		&discovery.DiscoveryRequest{Node: &core.Node{Id: "bogus~~~"}, TypeUrl: resource.RouteType},
	}
	var out [][]byte
	for _, r := range reqs {
		b, _ := proto.Marshal(r)
		out = append(out, b)
	}
	return out
}

// FuzzSotWRequests feeds arbitrary request sequences to one connection: it
// must never panic, and every response it sends is of a requested type and
// carries a nonce.
func FuzzSotWRequests(f *testing.F) {
	seeds := seedRequests()
	for i := range seeds {
		f.Add(seeds[i], seeds[(i+1)%len(seeds)])
	}
	f.Fuzz(func(t *testing.T, a, b []byte) {
		s, _, _, _ := offlineServer(t)
		st := &fakeSotW{}
		c := s.newConn(context.Background(), "")
		c.sotw = st
		requested := map[string]bool{}
		for _, data := range [][]byte{a, b, a} {
			req := &discovery.DiscoveryRequest{}
			if proto.Unmarshal(data, req) != nil {
				return
			}
			requested[req.GetTypeUrl()] = true
			if err := c.handleRequest(req); err != nil {
				return // the stream would end with this status
			}
		}
		for _, r := range st.sent {
			if !requested[r.GetTypeUrl()] || r.GetNonce() == "" {
				t.Fatalf("response %s nonce %q not answering a request", r.GetTypeUrl(), r.GetNonce())
			}
		}
	})
}

// FuzzDeltaRequests does the same for incremental requests.
func FuzzDeltaRequests(f *testing.F) {
	node := &core.Node{Id: "sidecar~10.0.0.1~a-0.default~default.svc.cluster.local"}
	for _, r := range []*discovery.DeltaDiscoveryRequest{
		{Node: node, TypeUrl: resource.ClusterType},
		{Node: node, TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{"x", "*"}, ResourceNamesUnsubscribe: []string{"x"}},
		{Node: node, TypeUrl: resource.ListenerType, InitialResourceVersions: map[string]string{"a": "1"}, ResponseNonce: "n"},
	} {
		b, _ := proto.Marshal(r)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req := &discovery.DeltaDiscoveryRequest{}
		if proto.Unmarshal(data, req) != nil {
			return
		}
		s, _, _, _ := offlineServer(t)
		st := &fakeDelta{}
		c := s.newConn(context.Background(), "")
		c.delta = st
		for range 2 {
			if err := c.handleDelta(req); err != nil {
				return
			}
		}
		for _, r := range st.sent {
			if r.GetTypeUrl() != req.GetTypeUrl() || r.GetNonce() == "" {
				t.Fatalf("response %s nonce %q for a %s request", r.GetTypeUrl(), r.GetNonce(), req.GetTypeUrl())
			}
		}
	})
}
