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
	// Sequences of issue 11's defects; the connection's nonces are fe-1-1,
	// fe-1-2, ... (frontend "fe", first connection).
	const ca, cb = "outbound|80||a.default.svc.cluster.local", "outbound|80||b.default.svc.cluster.local"
	reqs = append(reqs,
		// #1: EDS, then CDS, then EDS again looking like an ACK.
		&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNames: []string{ca}, VersionInfo: "old"},
		&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType, VersionInfo: "old"},
		&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNames: []string{ca}, ResponseNonce: "fe-1-1"},
		// #6: a NACK that adds a name.
		&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNames: []string{ca, cb}, ResponseNonce: "fe-1-1",
			ErrorDetail: &rpcstatus.Status{Code: 3, Message: "nack"}},
		// #8: named LDS, then no names and no nonce.
		&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ListenerType, ResourceNames: []string{"a.default.svc.cluster.local:80"}},
		&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ListenerType},
		// #10: an unsubscribe.
		&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResourceNames: []string{cb}, ResponseNonce: "fe-1-2"},
		// #11: a first request with a foreign nonce and an error.
		&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.EndpointType, ResponseNonce: "fe-9-3",
			ErrorDetail: &rpcstatus.Status{Code: 3, Message: "old stream"}},
	)
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
		s, store, _, _ := offlineServer(t)
		applyService(t, store, 1, "default", "a", 80)
		applyService(t, store, 2, "default", "b", 80)
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

func seedDeltaRequests() [][]byte {
	node := &core.Node{Id: "sidecar~10.0.0.1~a-0.default~default.svc.cluster.local"}
	var out [][]byte
	for _, r := range []*discovery.DeltaDiscoveryRequest{
		{Node: node, TypeUrl: resource.ClusterType},
		{Node: node, TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{"x", "*"}, ResourceNamesUnsubscribe: []string{"x"}},
		{Node: node, TypeUrl: resource.ListenerType, InitialResourceVersions: map[string]string{"a": "1"}, ResponseNonce: "n"},
		// Issue 11: #3 wildcard with a missing name, #7 a re-subscribe (the
		// request runs twice), #4 subscribe and unsubscribe at once.
		{Node: node, TypeUrl: resource.ClusterType, ResourceNamesSubscribe: []string{"*", "missing"}},
		{Node: node, TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{"outbound|80||a.default.svc.cluster.local"}},
		{Node: node, TypeUrl: resource.EndpointType, ResourceNamesSubscribe: []string{"a", "b", "c"}, ResourceNamesUnsubscribe: []string{"a"}, ResponseNonce: "fe-1-1"},
	} {
		b, _ := proto.Marshal(r)
		out = append(out, b)
	}
	return out
}

// FuzzDeltaRequests does the same for incremental requests.
func FuzzDeltaRequests(f *testing.F) {
	for _, b := range seedDeltaRequests() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req := &discovery.DeltaDiscoveryRequest{}
		if proto.Unmarshal(data, req) != nil {
			return
		}
		s, store, _, _ := offlineServer(t)
		applyService(t, store, 1, "default", "a", 80)
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
