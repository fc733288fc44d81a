package xdsgen

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// TestGoldenGRPCMTLS pins, for each manifest testdata/grpcmtls/<case>.yaml,
// the xDS credentials of proxyless gRPC in testdata/grpcmtls/<case>.json:
// the clusters of a client in namespace client without xDS credentials and
// of one with them (labelled tlsMode istio), and the server listeners of
// the gRPC servers of the pods 10.1.0.1 and 10.1.0.2 in namespace shop.
// Every resource generated passes validateDeep and the checks of Envoy
// (loadChecks) and grpc-go (grpcChecks, with its TLS rules). Regenerate
// with -update and review the diff.
func TestGoldenGRPCMTLS(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "grpcmtls", "*.yaml"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	xdsCreds := map[string]string{model.TLSModeLabel: model.IstioTLSMode}
	servers := func(r *Resource) bool { return strings.HasPrefix(r.Name, GRPCServerListenerPrefix+"0.0.0.0:") }
	clusters := func(r *Resource) bool { return strings.HasPrefix(r.Name, "outbound|") }
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
				{"clientClusters", Proxy{Generator: GRPC, Namespace: "client"}, resource.ClusterType, clusters},
				{"xdsCredentialsClientClusters", Proxy{Generator: GRPC, Namespace: "client", Labels: xdsCreds}, resource.ClusterType, clusters},
				{"server1Listeners", Proxy{Generator: GRPC, Namespace: "shop", IP: "10.1.0.1"}, resource.ListenerType, servers},
				{"server2Listeners", Proxy{Generator: GRPC, Namespace: "shop", IP: "10.1.0.2"}, resource.ListenerType, servers},
			} {
				out[tc.key] = goldenValue(t, m, tc.key, tc.proxy, tc.typeURL, tc.keep, loadChecks, grpcChecks)
			}
			out["ignored"] = m.Problems()
			compareGolden(t, strings.TrimSuffix(in, ".yaml")+".json", out)
		})
	}
}
