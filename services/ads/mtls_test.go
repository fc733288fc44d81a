package ads

import (
	"context"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestSidecarMTLS: through the frontend (change stream, model, ADS), with
// a mesh-wide STRICT PeerAuthentication, the sidecar of the pod serving
// web gets only mTLS chains (a required client certificate) on web's
// target port, and another sidecar's cluster to web sends mTLS to the
// endpoints that have a sidecar (transport socket matches).
func TestSidecarMTLS(t *testing.T) {
	f := startFrontend(t, func(f *frontend) {
		f.publish(t, pb.Op_OP_ADD, "", "Service", service("default", "web", 80))
		f.publish(t, pb.Op_OP_ADD, "", "Pod", map[string]any{
			"metadata": map[string]any{"name": "web-0", "namespace": "default", "labels": map[string]any{"app": "web", "security.istio.io/tlsMode": "istio"}},
			"spec":     map[string]any{"serviceAccountName": "web"},
			"status":   map[string]any{"podIP": "10.1.0.1"},
		})
		sl := slice("default", "web", 8080, "10.1.0.1")
		sl["endpoints"].([]any)[0].(map[string]any)["targetRef"] = map[string]any{"kind": "Pod", "name": "web-0", "namespace": "default"}
		f.publish(t, pb.Op_OP_ADD, "discovery.k8s.io", "EndpointSlice", sl)
		f.publish(t, pb.Op_OP_ADD, "security.istio.io", "PeerAuthentication", map[string]any{
			"metadata": map[string]any{"name": "default", "namespace": "istio-system"},
			"spec":     map[string]any{"mtls": map[string]any{"mode": "STRICT"}},
		})
	})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()

	server := dial(ctx, t, f.addr, &core.Node{Id: "sidecar~10.1.0.1~web-0.default~default.svc.cluster.local"})
	server.send(&discovery.DiscoveryRequest{TypeUrl: resource.ListenerType})
	var vi *listener.Listener
	for _, a := range server.recv().GetResources() {
		l := &listener.Listener{}
		if err := a.UnmarshalTo(l); err != nil {
			t.Fatal(err)
		}
		if l.GetName() == "virtualInbound" {
			vi = l
		}
	}
	if vi == nil {
		t.Fatal("no virtualInbound listener")
	}
	chains := 0
	for _, fc := range vi.GetFilterChains() {
		if fc.GetFilterChainMatch().GetDestinationPort().GetValue() != 8080 {
			continue
		}
		chains++
		if fc.GetFilterChainMatch().GetTransportProtocol() != "tls" || fc.GetTransportSocket() == nil {
			t.Errorf("chain %s on 8080 under STRICT: match %v, transport socket %v", fc.GetName(), fc.GetFilterChainMatch(), fc.GetTransportSocket())
		}
	}
	if chains == 0 {
		t.Error("no chain for port 8080")
	}

	client := dial(ctx, t, f.addr, &core.Node{Id: "sidecar~10.0.0.9~client-0.default~default.svc.cluster.local"})
	client.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
	found := false
	for _, a := range client.recv().GetResources() {
		c := &cluster.Cluster{}
		if err := a.UnmarshalTo(c); err != nil {
			t.Fatal(err)
		}
		if c.GetName() != "outbound|80||web.default.svc.cluster.local" {
			continue
		}
		found = true
		if m := c.GetTransportSocketMatches(); len(m) != 2 || m[0].GetName() != "tlsMode-istio" {
			t.Errorf("cluster to web: transport socket matches %v", m)
		}
	}
	if !found {
		t.Error("no cluster to web")
	}
}
