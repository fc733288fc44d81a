package xdsgen

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"

	"github.com/pilotwire/pilotwire/pkg/model"

	// The Any fields of the golden resources must resolve.
	_ "github.com/envoyproxy/go-control-plane/pkg/wellknown"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata")

// goldenPodIP is the pod the golden sidecar runs on: an endpoint of
// web.shop (HTTP 80 -> 8080, gRPC 9090 -> 9091), of api.shop's unnamed
// port (8080 -> 8081, sniffed) and of the headless db.shop (TCP 5432).
const goldenPodIP = "10.1.0.1"

// goldenMesh has every kind of port and service a sidecar meets: HTTP,
// gRPC, TCP, unnamed (sniffed), a well-known TCP port with an unknown name
// (dns-tcp/53) and UDP; headless and ExternalName services; the same short
// name in two namespaces.
func goldenMesh(t testing.TB) *model.Mesh {
	db := svc("shop", "db", "", port("tcp-postgres", 5432, endpoint(goldenPodIP, 5432, "z1", "c1"), endpoint("10.1.3.2", 5432, "z1", "c1")))
	db.Headless = true
	ext := svc("shop", "ext", "", port("http", 80), port("https", 443))
	ext.ExternalName = "example.com"
	return mesh(t,
		svc("shop", "web", "10.0.0.1",
			port("http", 80, endpoint(goldenPodIP, 8080, "z1", "c1"), endpoint("10.1.0.2", 8080, "z2", "c1")),
			port("grpc-api", 9090, endpoint(goldenPodIP, 9091, "z1", "c1")),
		),
		svc("shop", "api", "10.0.0.3",
			port("redis", 6379, endpoint("10.1.1.1", 6379, "z1", "c1")),
			port("", 8080, endpoint(goldenPodIP, 8081, "z1", "c1")),
		),
		svc("other", "web", "10.0.0.2", port("http-web", 80, endpoint("10.2.0.1", 80, "z1", "c1"))),
		svc("kube-system", "kube-dns", "10.0.0.10",
			port("dns-tcp", 53, endpoint("10.1.4.1", 53, "", "c1")),
			&model.Port{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, Endpoints: []model.Endpoint{endpoint("10.1.4.1", 53, "", "c1")}}),
		db, ext,
	)
}

func goldenProxy() Proxy {
	return Proxy{Generator: Envoy, Type: Sidecar, IP: goldenPodIP, Namespace: "shop"}
}

// TestGoldenSidecar pins the listeners, clusters and routes of a sidecar on
// a pod of goldenMesh, as reviewed JSON. Regenerate with -update and review
// the diff.
func TestGoldenSidecar(t *testing.T) {
	m := goldenMesh(t)
	for _, tc := range []struct{ file, typeURL string }{
		{"sidecar-clusters.json", resource.ClusterType},
		{"sidecar-listeners.json", resource.ListenerType},
		{"sidecar-routes.json", resource.RouteType},
	} {
		t.Run(tc.file, func(t *testing.T) {
			set, err := GenerateFor(m, goldenProxy(), tc.typeURL)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range set.Resources {
				if err := validateDeep(r.Msg); err != nil {
					t.Errorf("%s: %v", r.Name, err)
				}
			}
			got := goldenJSON(t, set)
			path := filepath.Join("testdata", tc.file)
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("%s differs (-want +got; -update rewrites it):\n%s", path, diff)
			}
		})
	}
}

// goldenJSON renders a set as a JSON array, indented, keys sorted (protojson
// output is deliberately unstable in its spacing; re-encoding fixes it).
func goldenJSON(t testing.TB, set *Set) []byte {
	t.Helper()
	var all []any
	for _, r := range set.Resources {
		b, err := protojson.Marshal(r.Any)
		if err != nil {
			t.Fatalf("%s: %v", r.Name, err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		all = append(all, v)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(all); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// goldenValue generates typeURL for p, checks every resource (validateDeep
// and each of checks, failures named by key), and returns those keep
// selects as the JSON value a golden file holds.
func goldenValue(t *testing.T, m *model.Mesh, key string, p Proxy, typeURL string, keep func(*Resource) bool, checks ...func(proto.Message) []string) any {
	t.Helper()
	set, err := GenerateFor(m, p, typeURL)
	if err != nil {
		t.Fatal(err)
	}
	var kept []*Resource
	for _, r := range set.Resources {
		if err := validateDeep(r.Msg); err != nil {
			t.Errorf("%s %s: %v", key, r.Name, err)
		}
		for _, check := range checks {
			for _, why := range check(r.Msg) {
				t.Errorf("%s %s: %s", key, r.Name, why)
			}
		}
		if keep(r) {
			kept = append(kept, r)
		}
	}
	var v any
	if err := json.Unmarshal(goldenJSON(t, &Set{Resources: kept}), &v); err != nil {
		t.Fatal(err)
	}
	return v
}
