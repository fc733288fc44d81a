package gatewayapi_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/pilotwire/pilotwire/pkg/gatewayapi"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestGolden converts each testdata/<case>.yaml and compares the configs
// and status with testdata/<case>.golden.json.
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no test cases: %v", err)
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".yaml")
		t.Run(name, func(t *testing.T) {
			in := readInput(t, f)
			got := render(t, gatewayapi.Convert(in))
			golden := strings.TrimSuffix(f, ".yaml") + ".golden.json"
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), string(got)); diff != "" {
				t.Errorf("%s differs (-want +got; -update rewrites it):\n%s", golden, diff)
			}
		})
	}
}

// TestDeterministic: the input order does not change the output.
func TestDeterministic(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, f := range files {
		in := readInput(t, f)
		want := render(t, gatewayapi.Convert(in))
		r := rand.New(rand.NewPCG(1, 2))
		for range 5 {
			shuffle(r, in.Gateways)
			shuffle(r, in.HTTPRoutes)
			shuffle(r, in.GRPCRoutes)
			shuffle(r, in.ReferenceGrants)
			shuffle(r, in.Services)
			if got := render(t, gatewayapi.Convert(in)); !bytes.Equal(got, want) {
				t.Fatalf("%s: output depends on input order:\n%s", f, cmp.Diff(string(want), string(got)))
			}
		}
	}
}

func shuffle[T any](r *rand.Rand, s []T) {
	r.Shuffle(len(s), func(i, j int) { s[i], s[j] = s[j], s[i] })
}

// readInput decodes a multi-document YAML file: Gateway API objects plus
// Services, ServiceEntries (name and hosts), Namespaces (labels) and
// Secrets (any Secret turns CheckSecrets on).
func readInput(t *testing.T, path string) gatewayapi.Input {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	in := gatewayapi.Input{Namespaces: map[string]map[string]string{}}
	for i, doc := range strings.Split(string(data), "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("%s doc %d: %v", path, i, err)
		}
		decode := func(v any) {
			if err := yaml.UnmarshalStrict([]byte(doc), v); err != nil {
				t.Fatalf("%s doc %d (%s): %v", path, i, tm.Kind, err)
			}
		}
		switch tm.Kind {
		case "Gateway":
			var o gwv1.Gateway
			decode(&o)
			in.Gateways = append(in.Gateways, &o)
		case "HTTPRoute":
			var o gwv1.HTTPRoute
			decode(&o)
			in.HTTPRoutes = append(in.HTTPRoutes, &o)
		case "GRPCRoute":
			var o gwv1.GRPCRoute
			decode(&o)
			in.GRPCRoutes = append(in.GRPCRoutes, &o)
		case "ReferenceGrant":
			var o gwv1beta1.ReferenceGrant
			decode(&o)
			in.ReferenceGrants = append(in.ReferenceGrants, &o)
		case "Service":
			var o corev1.Service
			decode(&o)
			in.Services = append(in.Services, types.NamespacedName{Namespace: o.Namespace, Name: o.Name})
		case "Secret":
			var o corev1.Secret
			decode(&o)
			in.Secrets = append(in.Secrets, types.NamespacedName{Namespace: o.Namespace, Name: o.Name})
			in.CheckSecrets = true
		case "Namespace":
			var o corev1.Namespace
			decode(&o)
			in.Namespaces[o.Name] = o.Labels
		case "ServiceEntry":
			var o struct {
				Metadata metav1.ObjectMeta `json:"metadata"`
				Spec     struct {
					Hosts []string `json:"hosts"`
				} `json:"spec"`
			}
			if err := yaml.Unmarshal([]byte(doc), &o); err != nil {
				t.Fatal(err)
			}
			in.ServiceEntries = append(in.ServiceEntries, gatewayapi.ServiceEntry{Namespace: o.Metadata.Namespace, Name: o.Metadata.Name, Hosts: o.Spec.Hosts})
		default:
			t.Fatalf("%s doc %d: unexpected kind %q", path, i, tm.Kind)
		}
	}
	return in
}

// render is the golden form of an output: indented JSON, specs in
// protojson.
func render(t *testing.T, out gatewayapi.Output) []byte {
	t.Helper()
	type cfg struct {
		Name      string          `json:"name"`
		Namespace string          `json:"namespace"`
		Source    gatewayapi.Ref  `json:"source"`
		Spec      json.RawMessage `json:"spec"`
	}
	spec := func(m proto.Message) json.RawMessage {
		b, err := protojson.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := json.Compact(&buf, b); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	doc := struct {
		Gateways        []cfg             `json:"gateways"`
		VirtualServices []cfg             `json:"virtualServices"`
		Status          gatewayapi.Status `json:"status"`
	}{Status: out.Status}
	for _, g := range out.Gateways {
		doc.Gateways = append(doc.Gateways, cfg{g.Name, g.Namespace, g.Source, spec(g.Spec)})
	}
	for _, v := range out.VirtualServices {
		doc.VirtualServices = append(doc.VirtualServices, cfg{v.Name, v.Namespace, v.Source, spec(v.Spec)})
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}
