package xdsgen

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
	"github.com/pilotwire/pilotwire/pkg/model"
)

// authzWorkload is the workload of the authz fixtures (testdata/authz
// workload.yaml): pod 10.1.0.5 of shop/web, labels app=web, serving HTTP
// 8080, TCP 9000 and a sniffed 7070.
var authzWorkload = struct {
	ip, ns string
	labels map[string]string
}{"10.1.0.5", "shop", map[string]string{"app": "web"}}

// TestGoldenAuthz pins, for each testdata/authz/<case>.yaml (applied on
// top of workload.yaml, with <case>.meshconfig (YAML) as the mesh config when
// present), the inbound chains' filters a sidecar of the workload gets
// (virtualInbound: RBAC HTTP and network filters, ext_authz, jwt_authn),
// the HTTP filters of its proxyless gRPC server listener, and the
// problems the model reports. Every resource passes validateDeep.
// Regenerate with -update and review the diff.
func TestGoldenAuthz(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "authz", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	workload, err := os.ReadFile(filepath.Join("testdata", "authz", "workload.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, in := range inputs {
		if filepath.Base(in) == "workload.yaml" {
			continue
		}
		n++
		t.Run(filepath.Base(in), func(t *testing.T) {
			var mc *meshconfig.MeshConfig
			if data, err := os.ReadFile(strings.TrimSuffix(in, ".yaml") + ".meshconfig"); err == nil {
				if mc, err = meshconfig.Parse(data); err != nil {
					t.Fatal(err)
				}
			}
			body, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			combined := filepath.Join(t.TempDir(), "mesh.yaml")
			if err := os.WriteFile(combined, append(append(workload, "\n---\n"...), body...), 0o644); err != nil {
				t.Fatal(err)
			}
			m := manifestStore(t, combined, model.WithMeshConfig(mc)).Snapshot()
			out := map[string]any{"ignored": m.Problems()}
			for _, g := range []Generator{Envoy, GRPC} {
				p := Proxy{Generator: g, IP: authzWorkload.ip, Namespace: authzWorkload.ns, Labels: authzWorkload.labels, Mesh: mc}
				set, err := GenerateFor(m, p, resource.ListenerType)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range set.Resources {
					if err := validateDeep(r.Msg); err != nil {
						t.Errorf("%v %s: %v", g, r.Name, err)
					}
					l := r.Msg.(*listenerv3.Listener)
					switch {
					case g == Envoy && r.Name == VirtualInboundListener:
						out["envoyInbound"] = chainFilters(t, l)
					case g == GRPC && r.Name == GRPCServerListenerPrefix+"0.0.0.0:8080":
						out["grpcServer"] = chainFilters(t, l)
					}
				}
			}
			compareGolden(t, strings.TrimSuffix(in, ".yaml")+".json", out)
		})
	}
	if n == 0 {
		t.Fatal("no cases")
	}
}

// chainFilters are a listener's filters by chain (name and index), with
// the HTTP connection managers' HTTP filters in place of the manager.
func chainFilters(t *testing.T, l *listenerv3.Listener) []any {
	t.Helper()
	var out []any
	for _, fc := range l.GetFilterChains() {
		var filters []any
		for _, f := range fc.GetFilters() {
			b, err := protojson.Marshal(f)
			if err != nil {
				t.Fatal(err)
			}
			var v map[string]any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			if f.GetName() == hcmFilterName {
				tc := v["typedConfig"].(map[string]any)
				v = map[string]any{"name": f.GetName(), "httpFilters": tc["httpFilters"]}
			}
			filters = append(filters, v)
		}
		match, _ := protojson.Marshal(fc.GetFilterChainMatch())
		var mv any
		_ = json.Unmarshal(match, &mv)
		out = append(out, map[string]any{"chain": fc.GetName(), "match": mv, "filters": filters})
	}
	return out
}
