package xdsgen

import (
	"os"
	"path/filepath"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
)

// TestGatewaySDSResourceNames: a server's credentialName becomes the SDS
// resource names of its chain as Istio names them: a bare name is
// kubernetes://<name>, an explicit kubernetes:// or
// kubernetes-gateway://<ns>/<name> (what Gateway API certificateRefs
// become) is kept as it is, and MUTUAL adds the same name with -cacert
// for the validation context.
func TestGatewaySDSResourceNames(t *testing.T) {
	const gw = `apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: ingress, namespace: istio-system, creationTimestamp: "2024-01-01T00:00:00Z"}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: https-bare, protocol: HTTPS}
    hosts: ["bare.example.com"]
    tls: {mode: SIMPLE, credentialName: bare-cert}
  - port: {number: 443, name: https-explicit, protocol: HTTPS}
    hosts: ["explicit.example.com"]
    tls: {mode: MUTUAL, credentialName: "kubernetes://explicit-cert"}
  - port: {number: 443, name: https-gwapi, protocol: HTTPS}
    hosts: ["gwapi.example.com"]
    tls: {mode: MUTUAL, credentialName: "kubernetes-gateway://istio-system/gwapi-cert"}
`
	path := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(path, []byte(gw), 0o600); err != nil {
		t.Fatal(err)
	}
	m := manifestStore(t, path).Snapshot()
	p := Proxy{Generator: Envoy, Type: Router, Namespace: "istio-system", Labels: map[string]string{"istio": "ingressgateway"}}
	set, err := GenerateFor(m, p, resource.ListenerType)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{} // first SNI → certificate names, then the validation context's
	for _, r := range set.Resources {
		for _, fc := range r.Msg.(*listenerv3.Listener).GetFilterChains() {
			ts := fc.GetTransportSocket()
			if ts == nil {
				continue
			}
			var ctx tlsv3.DownstreamTlsContext
			if err := ts.GetTypedConfig().UnmarshalTo(&ctx); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, c := range ctx.GetCommonTlsContext().GetTlsCertificateSdsSecretConfigs() {
				names = append(names, c.GetName())
			}
			if v := ctx.GetCommonTlsContext().GetValidationContextSdsSecretConfig(); v != nil {
				names = append(names, v.GetName())
			}
			got[fc.GetFilterChainMatch().GetServerNames()[0]] = names
		}
	}
	want := map[string][]string{
		"bare.example.com":     {"kubernetes://bare-cert"},
		"explicit.example.com": {"kubernetes://explicit-cert", "kubernetes://explicit-cert-cacert"},
		"gwapi.example.com":    {"kubernetes-gateway://istio-system/gwapi-cert", "kubernetes-gateway://istio-system/gwapi-cert-cacert"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("SDS names (-want +got):\n%s", d)
	}
}
