package xdsgen

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"sigs.k8s.io/yaml"

	"github.com/pilotwire/pilotwire/pkg/model"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestGoldenIstio pins, for each manifest testdata/istio/<case>.yaml, the
// clusters and load assignments (and the routes carrying hash policies) a
// sidecar and a proxyless gRPC client in namespace default get, and what
// the model ignores, in testdata/istio/<case>.json. Regenerate with
// -update and review the diff.
func TestGoldenIstio(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "istio", "*.yaml"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	for _, in := range inputs {
		t.Run(filepath.Base(in), func(t *testing.T) {
			m := manifestStore(t, in).Snapshot()
			out := map[string]any{}
			for _, tc := range []struct {
				key     string
				gen     Generator
				typeURL string
			}{
				{"envoyClusters", Envoy, resource.ClusterType},
				{"envoyRoutes", Envoy, resource.RouteType},
				{"loadAssignments", Envoy, resource.EndpointType},
				{"grpcClusters", GRPC, resource.ClusterType},
				{"grpcRoutes", GRPC, resource.RouteType},
			} {
				set, err := GenerateFor(m, Proxy{Generator: tc.gen, Namespace: "default"}, tc.typeURL)
				if err != nil {
					t.Fatal(err)
				}
				var keep []*Resource
				for _, r := range set.Resources {
					if err := validateDeep(r.Msg); err != nil {
						t.Errorf("%s %s: %v", tc.key, r.Name, err)
					}
					// The static clusters are pinned by the sidecar goldens.
					if tc.typeURL != resource.ClusterType || strings.HasPrefix(r.Name, "outbound|") {
						keep = append(keep, r)
					}
				}
				var v any
				if err := json.Unmarshal(goldenJSON(t, &Set{Resources: keep}), &v); err != nil {
					t.Fatal(err)
				}
				out[tc.key] = v
			}
			out["ignored"] = m.Problems()
			compareGolden(t, strings.TrimSuffix(in, ".yaml")+".json", out)
		})
	}
}

// manifestStore applies the objects of a multi-document YAML file, in
// order, as change records of cluster c1.
func manifestStore(t testing.TB, path string, opts ...model.Option) *model.Store {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s := model.NewStore(opts...)
	for i, doc := range strings.Split(string(data), "\n---\n") {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name      string `json:"name"`
				Namespace string `json:"namespace"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(js, &head); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
		group, version, found := strings.Cut(head.APIVersion, "/")
		if !found {
			group, version = "", head.APIVersion
		}
		rec := &pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_ADD, Object: js, Ref: &pb.ObjectRef{
			Group: group, Version: version, Kind: head.Kind, Namespace: head.Metadata.Namespace, Name: head.Metadata.Name,
		}}
		if err := s.Apply(rec, uint64(i+1)); err != nil {
			t.Fatalf("document %d: %v", i, err)
		}
	}
	return s
}
