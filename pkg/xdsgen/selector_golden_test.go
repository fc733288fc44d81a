package xdsgen

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// TestGoldenWorkloadSelector pins, for each manifest
// testdata/workloadselector/<case>.yaml, the outbound clusters that
// sidecars and proxyless gRPC clients with different namespaces and labels
// (node metadata LABELS) get: Sidecars and DestinationRules with a
// workloadSelector apply to the workloads they select, Istio's way.
// Regenerate with -update and review the diff.
func TestGoldenWorkloadSelector(t *testing.T) {
	proxies := []struct {
		name, ns string
		labels   map[string]string
	}{
		{"default", "default", nil},
		{"default-web", "default", map[string]string{"app": "web"}},
		{"default-web-v2", "default", map[string]string{"app": "web", "version": "v2"}},
		{"default-canary", "default", map[string]string{"app": "canary"}},
		{"other-canary", "other", map[string]string{"app": "canary"}},
		{"ops-web", "ops", map[string]string{"app": "web"}},
	}
	inputs, err := filepath.Glob(filepath.Join("testdata", "workloadselector", "*.yaml"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	for _, in := range inputs {
		t.Run(filepath.Base(in), func(t *testing.T) {
			m := manifestStore(t, in).Snapshot()
			out := map[string]any{}
			for _, p := range proxies {
				got := map[string]any{}
				for _, tc := range []struct {
					key string
					gen Generator
				}{{"envoyClusters", Envoy}, {"grpcClusters", GRPC}} {
					set, err := GenerateFor(m, Proxy{Generator: tc.gen, Namespace: p.ns, Labels: p.labels}, resource.ClusterType)
					if err != nil {
						t.Fatal(err)
					}
					var keep []*Resource
					for _, r := range set.Resources {
						if err := validateDeep(r.Msg); err != nil {
							t.Errorf("%s %s %s: %v", p.name, tc.key, r.Name, err)
						}
						if strings.HasPrefix(r.Name, "outbound|") {
							keep = append(keep, r)
						}
					}
					var v any
					if err := json.Unmarshal(goldenJSON(t, &Set{Resources: keep}), &v); err != nil {
						t.Fatal(err)
					}
					got[tc.key] = v
				}
				out[p.name] = got
			}
			out["ignored"] = m.Problems()
			compareGolden(t, strings.TrimSuffix(in, ".yaml")+".json", out)
		})
	}
}
