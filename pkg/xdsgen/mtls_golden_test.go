package xdsgen

import (
	"path/filepath"
	"strings"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// TestGoldenMTLS pins, for each manifest testdata/mtls/<case>.yaml, the
// Istio mTLS of the Envoy sidecar shape in testdata/mtls/<case>.json:
// the outbound clusters a sidecar in namespace client gets (auto mTLS,
// DestinationRule TLS), the virtualInbound listener of the sidecar of the
// pod 10.1.0.1 in namespace shop (its chains by PeerAuthentication), and
// what the model ignores. Every resource generated for both passes
// validateDeep and Envoy's load checks. Regenerate with -update and
// review the diff.
func TestGoldenMTLS(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "mtls", "*.yaml"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	for _, in := range inputs {
		t.Run(filepath.Base(in), func(t *testing.T) {
			m := manifestStore(t, in).Snapshot()
			out := map[string]any{}
			for _, tc := range []struct {
				key     string
				proxy   Proxy
				typeURL string
				keep    func(*Resource) bool
			}{
				{"clientClusters", Proxy{Generator: Envoy, Namespace: "client"}, resource.ClusterType,
					func(r *Resource) bool { return strings.HasPrefix(r.Name, "outbound|") }},
				{"serverInbound", Proxy{Generator: Envoy, Namespace: "shop", IP: "10.1.0.1"}, resource.ListenerType,
					func(r *Resource) bool { return r.Name == VirtualInboundListener }},
				{"serverClusters", Proxy{Generator: Envoy, Namespace: "shop", IP: "10.1.0.1"}, resource.ClusterType,
					func(r *Resource) bool { return strings.HasPrefix(r.Name, "inbound|") }},
			} {
				out[tc.key] = goldenValue(t, m, tc.key, tc.proxy, tc.typeURL, tc.keep, loadChecks)
			}
			out["ignored"] = m.Problems()
			compareGolden(t, strings.TrimSuffix(in, ".yaml")+".json", out)
		})
	}
}

// TestInboundChainsAgreeWithClients: the server side accepts what the
// client side sends. For each mode, a client's auto-mTLS cluster to the
// service sends mTLS (ALPN istio) exactly when the server has a chain
// terminating Istio mTLS for that ALPN on the service's target port, and
// plaintext is accepted exactly when the mode is not STRICT.
func TestInboundChainsAgreeWithClients(t *testing.T) {
	tests := []struct {
		file           string
		port           uint32
		wantMTLS       bool // clients send mTLS and the server terminates it
		wantPlaintext  bool // the server accepts plaintext
		wantClientMTLS bool
	}{
		{file: "permissive.yaml", port: 8080, wantMTLS: true, wantPlaintext: true, wantClientMTLS: true},
		{file: "strict.yaml", port: 8080, wantMTLS: true, wantPlaintext: false, wantClientMTLS: true},
		{file: "disable.yaml", port: 8080, wantMTLS: false, wantPlaintext: true, wantClientMTLS: false},
		{file: "strict.yaml", port: 9000, wantMTLS: true, wantPlaintext: false, wantClientMTLS: true},
		{file: "strict.yaml", port: 7070, wantMTLS: true, wantPlaintext: false, wantClientMTLS: true},
		{file: "portlevel.yaml", port: 9000, wantMTLS: true, wantPlaintext: true, wantClientMTLS: true},
	}
	for _, tc := range tests {
		t.Run(tc.file+"/"+portString(int32(tc.port)), func(t *testing.T) {
			m := manifestStore(t, filepath.Join("testdata", "mtls", tc.file)).Snapshot()
			cds, err := GenerateFor(m, Proxy{Generator: Envoy, Namespace: "client"}, resource.ClusterType)
			if err != nil {
				t.Fatal(err)
			}
			servicePort := map[uint32]string{8080: "80", 9000: "9000", 7070: "7070"}[tc.port]
			c := msg[*clusterv3.Cluster](t, cds, "outbound|"+servicePort+"||web.shop.svc.cluster.local")
			clientMTLS := len(c.GetTransportSocketMatches()) > 0
			if clientMTLS != tc.wantClientMTLS {
				t.Errorf("client sends mTLS: %v, want %v", clientMTLS, tc.wantClientMTLS)
			}
			lds, err := GenerateFor(m, Proxy{Generator: Envoy, Namespace: "shop", IP: "10.1.0.1"}, resource.ListenerType)
			if err != nil {
				t.Fatal(err)
			}
			vi := msg[*listenerv3.Listener](t, lds, VirtualInboundListener)
			var mtls, plaintext bool
			for _, fc := range vi.GetFilterChains() {
				fm := fc.GetFilterChainMatch()
				if fm.GetDestinationPort().GetValue() != tc.port {
					continue
				}
				alpnOK := len(fm.GetApplicationProtocols()) == 0
				for _, a := range fm.GetApplicationProtocols() {
					alpnOK = alpnOK || a == "istio"
				}
				if fm.GetTransportProtocol() == tlsTransport && fc.GetTransportSocket() != nil && alpnOK {
					mtls = true
				}
				if fm.GetTransportProtocol() == rawBuffer {
					plaintext = true
				}
			}
			if mtls != tc.wantMTLS || plaintext != tc.wantPlaintext {
				t.Errorf("server terminates mTLS %v (want %v), accepts plaintext %v (want %v)", mtls, tc.wantMTLS, plaintext, tc.wantPlaintext)
			}
			if clientMTLS && !mtls {
				t.Error("clients send mTLS that the server does not terminate")
			}
		})
	}
}
