package xdsgen

import (
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// TestEndpointTLSModeMetadata: an endpoint whose workload carries Istio's
// security.istio.io/tlsMode label (set by Istio's injector on the pods it
// gives a sidecar) says so in its metadata, under
// envoy.transport_socket_match, for the clusters' transport socket
// matches (auto mTLS); "disabled" and no label say nothing, as in Istio's
// endpoint builder.
func TestEndpointTLSModeMetadata(t *testing.T) {
	ep := func(addr, tlsMode string) model.Endpoint {
		e := endpoint(addr, 8080, "z1", "c1")
		if tlsMode != "" {
			e.Labels = map[string]string{"app": "web", model.TLSModeLabel: tlsMode}
		}
		return e
	}
	m := mesh(t, svc("shop", "web", "10.0.0.1", port("http", 80,
		ep("10.1.0.1", "istio"), ep("10.1.0.2", "disabled"), ep("10.1.0.3", ""))))
	for _, gen := range []Generator{Envoy, GRPC} {
		set, err := GenerateFor(m, Proxy{Generator: gen, Namespace: "shop"}, resource.EndpointType)
		if err != nil {
			t.Fatal(err)
		}
		cla := msg[*endpointv3.ClusterLoadAssignment](t, set, "outbound|80||web.shop.svc.cluster.local")
		if err := validateDeep(cla); err != nil {
			t.Fatal(err)
		}
		got := map[string]*corev3.Metadata{}
		for _, lle := range cla.GetEndpoints() {
			for _, lb := range lle.GetLbEndpoints() {
				got[lb.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()] = lb.GetMetadata()
			}
		}
		want := map[string]*corev3.Metadata{
			"10.1.0.1": {FilterMetadata: map[string]*structpb.Struct{
				"envoy.transport_socket_match": {Fields: map[string]*structpb.Value{"tlsMode": structpb.NewStringValue("istio")}},
			}},
			"10.1.0.2": nil,
			"10.1.0.3": nil,
		}
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("generator %v: endpoint metadata (-want +got):\n%s", gen, diff)
		}
	}
}
