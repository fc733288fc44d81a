package gatewayapi_test

import (
	"fmt"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/pilotwire/pilotwire/pkg/gatewayapi"
)

// BenchmarkConvert converts 10 Gateways (2 listeners each) and 1,000
// HTTPRoutes (3 rules, a Gateway parent and a Service parent each) over
// 1,000 Services: one status writer round of a large cluster.
func BenchmarkConvert(b *testing.B) {
	in := gatewayapi.Input{}
	for g := range 10 {
		ns := fmt.Sprintf("ns-%d", g)
		in.Gateways = append(in.Gateways, &gwv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gw"},
			Spec: gwv1.GatewaySpec{GatewayClassName: gatewayapi.ClassName, Listeners: []gwv1.Listener{
				{Name: "http", Port: 80, Protocol: gwv1.HTTPProtocolType},
				{Name: "https", Port: 443, Protocol: gwv1.HTTPSProtocolType, TLS: &gwv1.ListenerTLSConfig{CertificateRefs: []gwv1.SecretObjectReference{{Name: "cert"}}}},
			}},
		})
	}
	prefix, port := gwv1.PathMatchPathPrefix, gwv1.PortNumber(8080)
	for r := range 1000 {
		ns, name := fmt.Sprintf("ns-%d", r%10), fmt.Sprintf("svc-%d", r)
		in.Services = append(in.Services, types.NamespacedName{Namespace: ns, Name: name})
		var rules []gwv1.HTTPRouteRule
		for i := range 3 {
			path := fmt.Sprintf("/api/v%d", i)
			rules = append(rules, gwv1.HTTPRouteRule{
				Matches:     []gwv1.HTTPRouteMatch{{Path: &gwv1.HTTPPathMatch{Type: &prefix, Value: &path}}},
				BackendRefs: []gwv1.HTTPBackendRef{{BackendRef: gwv1.BackendRef{BackendObjectReference: gwv1.BackendObjectReference{Name: gwv1.ObjectName(name), Port: &port}}}},
			})
		}
		svcKind, core := gwv1.Kind("Service"), gwv1.Group("")
		in.HTTPRoutes = append(in.HTTPRoutes, &gwv1.HTTPRoute{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: gwv1.HTTPRouteSpec{
				CommonRouteSpec: gwv1.CommonRouteSpec{ParentRefs: []gwv1.ParentReference{{Name: "gw"}, {Group: &core, Kind: &svcKind, Name: gwv1.ObjectName(name)}}},
				Hostnames:       []gwv1.Hostname{gwv1.Hostname(name + ".example.com")},
				Rules:           rules,
			},
		})
	}
	b.ReportAllocs()
	for b.Loop() {
		out := gatewayapi.Convert(in)
		if len(out.VirtualServices) != 3000 {
			b.Fatalf("%d VirtualServices, want 3000", len(out.VirtualServices))
		}
	}
}
