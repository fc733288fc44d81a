package xdsgen

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
)

// routingProxies are the clients every routing case is generated for: a
// sidecar in namespace default with labels app=client, a proxyless gRPC
// client there, and a router (istio=ingressgateway, pod IP 10.244.5.1) in
// istio-system.
var routingProxies = []struct {
	key   string
	proxy Proxy
	types []string
}{
	{"sidecar", Proxy{Generator: Envoy, Namespace: "default", Labels: map[string]string{"app": "client"}}, []string{resource.RouteType, resource.ListenerType}},
	{"grpc", Proxy{Generator: GRPC, Namespace: "default"}, []string{resource.RouteType, resource.ListenerType}},
	{"router", Proxy{Generator: Envoy, Type: Router, Namespace: "istio-system", IP: "10.244.5.1", Labels: map[string]string{"istio": "ingressgateway"}},
		[]string{resource.ClusterType, resource.ListenerType, resource.RouteType}},
}

// TestGoldenRouting pins, for each manifest testdata/routing/<case>.yaml,
// the routes and listeners (the per-address and gateway ones; the
// sidecar's virtual and per-port HTTP listeners are pinned by the sidecar
// goldens) the clients of routingProxies get, and what the model ignores,
// in testdata/routing/<case>.json. Every resource passes ValidateAll.
// Regenerate with -update and review the diff.
func TestGoldenRouting(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "routing", "*.yaml"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	for _, in := range inputs {
		t.Run(filepath.Base(in), func(t *testing.T) {
			m := manifestStore(t, in).Snapshot()
			out := map[string]any{}
			for _, pc := range routingProxies {
				if pc.proxy.Type == Router && !m.HasGateways() {
					continue
				}
				for _, typeURL := range pc.types {
					set, err := GenerateFor(m, pc.proxy, typeURL)
					if err != nil {
						t.Fatal(err)
					}
					var keep []*Resource
					for _, r := range set.Resources {
						if err := validateDeep(r.Msg); err != nil {
							t.Errorf("%s %s %s: %v", pc.key, typeURL, r.Name, err)
						}
						if keepRouting(pc.proxy, typeURL, r.Name) {
							keep = append(keep, r)
						}
					}
					var v any
					if err := json.Unmarshal(goldenJSON(t, &Set{Resources: keep}), &v); err != nil {
						t.Fatal(err)
					}
					out[pc.key+" "+shortTypeName(typeURL)] = v
				}
			}
			out["ignored"] = m.Problems()
			compareGolden(t, strings.TrimSuffix(in, ".yaml")+".json", out)
		})
	}
}

func keepRouting(p Proxy, typeURL, name string) bool {
	switch {
	case p.Type == Router && typeURL == resource.ClusterType:
		return !strings.HasPrefix(name, "outbound|") || strings.Count(name, "|") == 3 && !strings.Contains(name, "||")
	case p.Generator == GRPC && typeURL == resource.ListenerType:
		return !strings.HasPrefix(name, GRPCServerListenerPrefix)
	case typeURL == resource.ListenerType && p.Type != Router:
		return name != VirtualInboundListener && name != VirtualOutboundListener && !strings.HasPrefix(name, "0.0.0.0_")
	}
	return true
}

func shortTypeName(typeURL string) string {
	return strings.TrimSuffix(typeURL[strings.LastIndex(typeURL, ".")+1:], "Configuration")
}

// compareGolden compares out, as indented JSON, with the golden file at
// path (rewritten under -update).
func compareGolden(t *testing.T, path string, out any) {
	t.Helper()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(out); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if diff := cmp.Diff(string(want), buf.String()); diff != "" {
		t.Errorf("%s differs (-want +got; -update rewrites it):\n%s", path, diff)
	}
}
