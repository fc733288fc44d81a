package xdsgen

import (
	"cmp"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	gocmp "github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
	"sigs.k8s.io/yaml"

	"github.com/pilotwire/pilotwire/internal/testkit/adstest"
	"github.com/pilotwire/pilotwire/pkg/meshconfig"
	"github.com/pilotwire/pilotwire/pkg/model"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// boundaryProxies are the proxies TestBoundaryValuesValidate generates
// for: sidecars with and without an inbound side, a gateway and a
// proxyless gRPC client, in the namespaces the testdata uses.
var boundaryProxies = []Proxy{
	{Generator: Envoy, Namespace: "default", Labels: map[string]string{"app": "client"}},
	{Generator: Envoy, Namespace: "app", IP: "10.0.0.1"},
	{Generator: Envoy, Type: Router, Namespace: "istio-system", Labels: map[string]string{"istio": "ingressgateway"}},
	// The Gateway API testdata's Gateway infra/gw, as Istio deploys it.
	{Generator: Envoy, Type: Router, Namespace: "infra", Labels: map[string]string{"gateway.networking.k8s.io/gateway-name": "gw"}},
	{Generator: GRPC, Namespace: "default"},
	// Workloads the workloadselector testdata's Sidecars and
	// DestinationRules select.
	{Generator: Envoy, Namespace: "default", Labels: map[string]string{"app": "web", "version": "v2"}},
	{Generator: Envoy, Namespace: "default", Labels: map[string]string{"app": "canary"}},
	// Proxies with a locality (the locality testdata's), whose load
	// assignments are ordered and weighted by it.
	{Generator: Envoy, Namespace: "app", Locality: model.Locality{Region: "us-east", Zone: "us-east-a", SubZone: "rack1"}},
	{Generator: GRPC, Namespace: "app", Locality: model.Locality{Region: "eu-west", Zone: "eu-west-a"}},
	{Generator: GRPC, Namespace: "app"},
	// A proxyless gRPC server that uses xDS credentials (the grpcmtls
	// testdata's pod).
	{Generator: GRPC, Namespace: "shop", IP: "10.1.0.1", Labels: map[string]string{model.TLSModeLabel: model.IstioTLSMode}},
}

var durationValue = regexp.MustCompile(`^[0-9.]+(ns|us|ms|s|m|h)$`)

// boundaryValues are the values a leaf of an Istio spec is replaced with:
// zero, negative and out-of-range numbers and durations, empty strings and
// strings no header or path may hold.
func boundaryValues(v any) []any {
	switch x := v.(type) {
	case float64:
		return []any{0.0, -1.0, 4294967295.0, 1e15}
	case bool:
		return []any{!x}
	case string:
		if durationValue.MatchString(x) {
			return []any{"0s", "0.0000001s", "-1s", "315576000000s"}
		}
		return []any{"", "a b\n\x00", "(("}
	}
	return nil
}

// badKeys replace the keys of maps (header names, label keys, and field
// names, which decoding then drops).
var badKeys = []string{"", "x\nsplit"}

// leafPaths lists the paths of every scalar below v, keyPaths those of
// every map key and listPaths those of every non-empty list, in a stable
// order.
func leafPaths(v any, path []any, out, keyPaths, listPaths *[][]any) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			p := append(slices.Clone(path), k)
			*keyPaths = append(*keyPaths, p)
			leafPaths(x[k], p, out, keyPaths, listPaths)
		}
	case []any:
		if len(x) > 0 {
			*listPaths = append(*listPaths, path)
		}
		for i, e := range x {
			leafPaths(e, append(slices.Clone(path), i), out, keyPaths, listPaths)
		}
	default:
		*out = append(*out, path)
	}
}

// renameKey renames the key at path (a map key) to key, and returns the
// function that undoes it.
func renameKey(v any, path []any, key string) func() {
	parent := getPath(v, path[:len(path)-1]).(map[string]any)
	old := path[len(path)-1].(string)
	val := parent[old]
	prev, had := parent[key]
	delete(parent, old)
	parent[key] = val
	return func() {
		delete(parent, key)
		if had {
			parent[key] = prev
		}
		parent[old] = val
	}
}

// deepCopy copies a decoded JSON value.
func deepCopy(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func getPath(v any, path []any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			v = v.(map[string]any)[k]
		case int:
			v = v.([]any)[k]
		}
	}
	return v
}

func setPath(v any, path []any, val any) {
	parent := getPath(v, path[:len(path)-1])
	switch k := path[len(path)-1].(type) {
	case string:
		parent.(map[string]any)[k] = val
	case int:
		parent.([]any)[k] = val
	}
}

type boundaryDoc struct {
	ref *pb.ObjectRef
	obj map[string]any
}

func readDocs(t *testing.T, path string) []boundaryDoc {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []boundaryDoc
	for i, doc := range strings.Split(string(data), "\n---\n") {
		js, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			t.Fatalf("%s document %d: %v", path, i, err)
		}
		var obj map[string]any
		if err := json.Unmarshal(js, &obj); err != nil {
			t.Fatalf("%s document %d: %v", path, i, err)
		}
		meta, _ := obj["metadata"].(map[string]any)
		name, _ := meta["name"].(string)
		ns, _ := meta["namespace"].(string)
		apiVersion, _ := obj["apiVersion"].(string)
		kind, _ := obj["kind"].(string)
		group, version, found := strings.Cut(apiVersion, "/")
		if !found {
			group, version = "", apiVersion
		}
		out = append(out, boundaryDoc{ref: &pb.ObjectRef{Group: group, Version: version, Kind: kind, Namespace: ns, Name: name}, obj: obj})
	}
	return out
}

// boundaryMesh applies docs as change records of cluster c1. A document
// that does not decode is one the mesh reports and ignores (the store
// returns its error and goes on); strict fails the test on it.
func boundaryMesh(t *testing.T, docs []boundaryDoc, strict bool) *model.Mesh {
	t.Helper()
	s := model.NewStore()
	for i, d := range docs {
		js, err := json.Marshal(d.obj)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Apply(&pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_ADD, Object: js, Ref: d.ref}, uint64(i+1)); err != nil && strict {
			t.Fatalf("document %d: %v", i, err)
		}
	}
	return s.Snapshot()
}

// invalidResources generates every type for every boundary proxy and
// returns what fails Envoy's own validation.
func invalidResources(t *testing.T, m *model.Mesh) []string {
	t.Helper()
	var out []string
	for _, p := range boundaryProxies {
		sets := generateAll(t, m, p)
		for typeURL, set := range sets {
			names := map[string]bool{}
			for _, r := range set.Resources {
				if names[r.Name] {
					out = append(out, fmt.Sprintf("%v %s: two resources of type %s have this name", p.Generator, r.Name, typeURL))
				}
				names[r.Name] = true
				for _, why := range resourceChecks(p.Generator, r) {
					out = append(out, fmt.Sprintf("%v %s: %s", p.Generator, r.Name, why))
				}
			}
		}
		for _, why := range crossChecks(sets) {
			out = append(out, fmt.Sprintf("%v: %s", p.Generator, why))
		}
	}
	return out
}

// grpcChecks are what grpc-go's xDS client refuses beyond Envoy's rules
// (its internal/xds/xdsclient/xdsresource): cluster load balancing it
// does not implement, a retry policy without retries or with a zero
// backoff, a route match other than prefix, path or regex, an empty
// prefix, suffix or contains string matcher in a header match, and the TLS
// it cannot take (grpcTLSChecks); and what a client older than gRFC A63
// (gRPC C-core 1.51) refuses: a header match in any field but the
// HeaderMatcher's own (string_match).
func grpcChecks(m proto.Message) []string {
	var out []string
	_ = eachMessage(m, func(m proto.Message) error {
		switch x := m.(type) {
		case *tlsv3.UpstreamTlsContext:
			out = append(out, grpcTLSChecks(x.GetCommonTlsContext(), false)...)
		case *tlsv3.DownstreamTlsContext:
			out = append(out, grpcTLSChecks(x.GetCommonTlsContext(), true)...)
			if x.GetRequireClientCertificate().GetValue() && grpcValidationContext(x.GetCommonTlsContext()).GetCaCertificateProviderInstance() == nil {
				out = append(out, "server requires a client certificate without a root provider")
			}
		case *clusterv3.Cluster:
			switch x.GetLbPolicy() {
			case clusterv3.Cluster_ROUND_ROBIN, clusterv3.Cluster_LEAST_REQUEST:
			case clusterv3.Cluster_RING_HASH:
				if f := x.GetRingHashLbConfig().GetHashFunction(); f != clusterv3.Cluster_RingHashLbConfig_XX_HASH {
					out = append(out, fmt.Sprintf("ring hash function %v", f))
				}
			default:
				out = append(out, fmt.Sprintf("lb policy %v", x.GetLbPolicy()))
			}
			if n := x.GetLeastRequestLbConfig().GetChoiceCount(); n != nil && n.GetValue() < 2 {
				out = append(out, fmt.Sprintf("least request choice count %d", n.GetValue()))
			}
			if len(x.GetTransportSocketMatches()) > 0 {
				out = append(out, "transport socket matches")
			}
		case *routev3.RetryPolicy:
			if n := x.GetNumRetries(); n != nil && n.GetValue() < 1 {
				out = append(out, "retry policy with num_retries 0")
			}
			if b := x.GetRetryBackOff(); b != nil && (b.GetBaseInterval().AsDuration() <= 0 || b.GetMaxInterval() != nil && b.GetMaxInterval().AsDuration() <= 0) {
				out = append(out, fmt.Sprintf("retry backoff %v", b))
			}
		case *routev3.RouteMatch:
			switch x.GetPathSpecifier().(type) {
			case *routev3.RouteMatch_Prefix, *routev3.RouteMatch_Path, *routev3.RouteMatch_SafeRegex:
			default:
				out = append(out, fmt.Sprintf("route match %T", x.GetPathSpecifier()))
			}
			for _, h := range x.GetHeaders() {
				if err := adstest.PreA63HeaderMatcher(h); err != nil {
					out = append(out, err.Error())
				}
				switch h.GetHeaderMatchSpecifier().(type) {
				case *routev3.HeaderMatcher_PrefixMatch, *routev3.HeaderMatcher_SuffixMatch, *routev3.HeaderMatcher_ContainsMatch:
					//lint:ignore SA1019 pre-A63 gRPC clients read only the deprecated fields
					if h.GetPrefixMatch()+h.GetSuffixMatch()+h.GetContainsMatch() == "" {
						out = append(out, fmt.Sprintf("header %s: empty string matcher %v", h.GetName(), h))
					}
				}
			}
		}
		return nil
	})
	return out
}

// grpcTLSChecks are what grpc-go's xDS security (gRFC A29, its
// xdsresource/unmarshal_cds.go and unmarshal_lds.go) refuses in a TLS
// context: tls_params, certificates other than from a provider instance
// (files, SDS), a validation context without a root provider, SAN
// matchers on a server, an identity provider missing on a server; and
// what pilotwire's bootstrap does not define: an instance other than
// "default".
func grpcTLSChecks(c *tlsv3.CommonTlsContext, server bool) []string {
	var out []string
	if c == nil {
		return []string{"TLS context without a common context"}
	}
	if c.GetTlsParams() != nil {
		out = append(out, "tls_params")
	}
	if len(c.GetTlsCertificates()) > 0 || len(c.GetTlsCertificateSdsSecretConfigs()) > 0 {
		out = append(out, "certificates from files or SDS")
	}
	vc := grpcValidationContext(c)
	root, identity := vc.GetCaCertificateProviderInstance(), c.GetTlsCertificateProviderInstance()
	switch {
	case root == nil && (!server || vc != nil):
		out = append(out, "no root certificate provider instance")
	case root != nil && root.GetInstanceName() != grpcCertProvider:
		out = append(out, fmt.Sprintf("root certificate provider instance %q", root.GetInstanceName()))
	}
	switch {
	case identity == nil && server:
		out = append(out, "server without an identity certificate provider instance")
	case identity != nil && identity.GetInstanceName() != grpcCertProvider:
		out = append(out, fmt.Sprintf("identity certificate provider instance %q", identity.GetInstanceName()))
	}
	//lint:ignore SA1019 grpc-go reads this field
	if server && len(vc.GetMatchSubjectAltNames()) > 0 {
		out = append(out, "SAN matchers on a server")
	}
	return out
}

// grpcValidationContext is the validation context grpc-go reads in c.
func grpcValidationContext(c *tlsv3.CommonTlsContext) *tlsv3.CertificateValidationContext {
	if vc := c.GetValidationContext(); vc != nil {
		return vc
	}
	return c.GetCombinedValidationContext().GetDefaultValidationContext()
}

// generateAll generates every type for p, by type URL.
func generateAll(t *testing.T, m *model.Mesh, p Proxy) map[string]*Set {
	t.Helper()
	sets := map[string]*Set{}
	for _, typeURL := range TypeURLs() {
		set, err := GenerateFor(m, p, typeURL)
		if err != nil {
			t.Fatal(err)
		}
		sets[typeURL] = set
	}
	return sets
}

// Most mutations change one resource or none of a proxy's, and walking
// every message of every resource dominates the test: the checks of a
// resource are kept by its encoding (Any.Value, which the generators
// marshal deterministically) and run once per distinct resource.
var checked, routeNamesOf sync.Map

// resourceChecks are validateDeep, loadChecks and, for gRPC, grpcChecks
// of r.
func resourceChecks(g Generator, r *Resource) []string {
	key := fmt.Sprintf("%v|%s|%s", g, r.Any.GetTypeUrl(), r.Any.GetValue())
	if v, ok := checked.Load(key); ok {
		return v.([]string)
	}
	var out []string
	if err := validateDeep(r.Msg); err != nil {
		out = append(out, err.Error())
	}
	out = append(out, loadChecks(r.Msg)...)
	if g == GRPC {
		out = append(out, grpcChecks(r.Msg)...)
	}
	checked.Store(key, out)
	return out
}

// routeNames are the route configurations listener l names (HCM's rds).
func routeNames(l *Resource) []string {
	key := string(l.Any.GetValue())
	if v, ok := routeNamesOf.Load(key); ok {
		return v.([]string)
	}
	var out []string
	_ = eachMessage(l.Msg, func(m proto.Message) error {
		if rds, ok := m.(*hcmv3.Rds); ok {
			out = append(out, rds.GetRouteConfigName())
		}
		return nil
	})
	routeNamesOf.Store(key, out)
	return out
}

// crossChecks are what would leave a proxy waiting for a resource it is
// never sent: a route configuration a listener names, a load assignment an
// EDS cluster names; and two listeners bound to one address.
func crossChecks(sets map[string]*Set) []string {
	has := func(typeURL, name string) bool {
		for _, r := range sets[typeURL].Resources {
			if r.Name == name {
				return true
			}
		}
		return false
	}
	var out []string
	bound := map[string]string{}
	for _, r := range sets[resource.ListenerType].Resources {
		l := r.Msg.(*listenerv3.Listener)
		if a := l.GetAddress().GetSocketAddress(); a != nil && (l.GetBindToPort() == nil || l.GetBindToPort().GetValue()) {
			addr := fmt.Sprintf("%s:%d", a.GetAddress(), a.GetPortValue())
			if other, ok := bound[addr]; ok {
				out = append(out, fmt.Sprintf("listeners %s and %s both bind %s", other, r.Name, addr))
			}
			bound[addr] = r.Name
		}
		for _, name := range routeNames(r) {
			if !has(resource.RouteType, name) {
				out = append(out, fmt.Sprintf("listener %s names route configuration %q, which is not sent", r.Name, name))
			}
		}
	}
	for _, r := range sets[resource.ClusterType].Resources {
		c := r.Msg.(*clusterv3.Cluster)
		if c.GetType() == clusterv3.Cluster_EDS {
			name := cmp.Or(c.GetEdsClusterConfig().GetServiceName(), c.GetName())
			if !has(resource.EndpointType, name) {
				out = append(out, fmt.Sprintf("cluster %s names load assignment %q, which is not sent", r.Name, name))
			}
		}
	}
	return out
}

// loadChecks are what Envoy checks when it loads a resource beyond its
// protoc-gen-validate constraints (which validateDeep runs): every regex
// compiles as RE2 (Go's regexp is RE2's syntax), a route configuration's
// virtual hosts have unique names and no domain twice, and a listener's
// filter chains have unique matches. (Chain names may repeat: Envoy
// accepts it, and Istio's inbound chains for mTLS and plaintext on one
// port share the port's name, as in the config dump of Istio's
// istioctl/pkg/authz/testdata/configdump.yaml.)
func loadChecks(m proto.Message) []string {
	var out []string
	_ = eachMessage(m, func(m proto.Message) error { // validateDeep reports what does not unpack
		switch x := m.(type) {
		case *matcherv3.RegexMatcher:
			if _, err := regexp.Compile(x.GetRegex()); err != nil {
				out = append(out, fmt.Sprintf("regex %q does not compile: %v", x.GetRegex(), err))
			}
		case *routev3.RouteConfiguration:
			vhosts, domains := map[string]bool{}, map[string]string{}
			for _, vh := range x.GetVirtualHosts() {
				if vhosts[vh.GetName()] {
					out = append(out, fmt.Sprintf("virtual host %q twice", vh.GetName()))
				}
				vhosts[vh.GetName()] = true
				for _, d := range vh.GetDomains() {
					if other, ok := domains[strings.ToLower(d)]; ok {
						out = append(out, fmt.Sprintf("domain %q in virtual hosts %q and %q", d, other, vh.GetName()))
					}
					domains[strings.ToLower(d)] = vh.GetName()
				}
			}
		case *listenerv3.Listener:
			matches := map[string]string{}
			for _, fc := range x.GetFilterChains() {
				b, err := proto.MarshalOptions{Deterministic: true}.Marshal(fc.GetFilterChainMatch())
				if err != nil {
					out = append(out, err.Error())
					continue
				}
				if other, ok := matches[string(b)]; ok {
					out = append(out, fmt.Sprintf("filter chains %q and %q have the same match %v", other, fc.GetName(), fc.GetFilterChainMatch()))
				}
				matches[string(b)] = fc.GetName()
			}
		case *routev3.WeightedCluster:
			var sum uint32
			for _, c := range x.GetClusters() {
				sum += c.GetWeight().GetValue()
			}
			if sum == 0 {
				out = append(out, "weighted clusters whose weights sum to 0")
			}
		}
		return nil
	})
	return out
}

// TestBoundaryValuesValidate changes, one at a time, every object in the
// generators' and the Gateway API translator's testdata: each scalar and
// map key of its spec (an EndpointSlice's endpoints and ports), labels and
// annotations becomes a zero, negative, out-of-range, empty or malformed
// value; each list gets its first element twice, and loses it; the object
// comes in twice under another name. Every resource generated from the
// result for boundaryProxies must still pass Envoy's validation and the
// checks of loadChecks, grpcChecks and crossChecks: one bad field of one
// object must never make a proxy reject a whole type (every cluster,
// every route) for everyone. What the mesh cannot translate it reports as
// a problem (TestInvalidValuesReported).
func TestBoundaryValuesValidate(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "*", "*.yaml"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no inputs: %v", err)
	}
	gatewayAPI, err := filepath.Glob(filepath.Join("..", "gatewayapi", "testdata", "*.yaml"))
	if err != nil || len(gatewayAPI) == 0 {
		t.Fatalf("no Gateway API inputs: %v", err)
	}
	inputs = append(inputs, gatewayAPI...)
	var mutated atomic.Int64
	t.Cleanup(func() { t.Logf("%d mutations", mutated.Load()) })
	for _, in := range inputs {
		t.Run(filepath.Base(filepath.Dir(in))+"/"+filepath.Base(in), func(t *testing.T) {
			t.Parallel()
			docs := readDocs(t, in)
			if bad := invalidResources(t, boundaryMesh(t, docs, true)); len(bad) > 0 {
				t.Fatalf("the unmutated input generates invalid resources:\n%s", strings.Join(bad, "\n"))
			}
			for _, d := range docs {
				// The object twice, under another name: two rules, routes,
				// gateways or entries for the same hosts and ports.
				mutated.Add(1)
				twin := boundaryDoc{ref: proto.Clone(d.ref).(*pb.ObjectRef), obj: deepCopy(t, d.obj).(map[string]any)}
				twin.ref.Name += "-twin"
				twin.obj["metadata"].(map[string]any)["name"] = twin.ref.Name
				if bad := invalidResources(t, boundaryMesh(t, append(slices.Clone(docs), twin), false)); len(bad) > 0 {
					t.Errorf("%s %s twice:\n  %s", d.ref.Kind, d.ref.Name, strings.Join(bad, "\n  "))
				}
				var paths, keyPaths, listPaths [][]any
				for _, top := range []string{"spec", "endpoints", "ports"} { // ports and endpoints: an EndpointSlice's
					if d.obj[top] != nil {
						leafPaths(d.obj[top], []any{top}, &paths, &keyPaths, &listPaths)
					}
				}
				if meta, ok := d.obj["metadata"].(map[string]any); ok {
					for _, k := range []string{"labels", "annotations"} {
						if meta[k] != nil {
							leafPaths(meta[k], []any{"metadata", k}, &paths, &keyPaths, &listPaths)
						}
					}
				}
				// A list's first element twice (two ports, servers, routes,
				// hosts alike), and the list without it.
				for _, path := range listPaths {
					list := getPath(d.obj, path).([]any)
					for _, v := range []struct {
						what string
						list []any
					}{{"its first element twice", append(slices.Clone(list), deepCopy(t, list[0]))}, {"no first element", list[1:]}} {
						mutated.Add(1)
						setPath(d.obj, path, v.list)
						bad := invalidResources(t, boundaryMesh(t, docs, false))
						setPath(d.obj, path, list)
						if len(bad) > 0 {
							t.Errorf("%s %s %v with %s:\n  %s", d.ref.Kind, d.ref.Name, path, v.what, strings.Join(bad, "\n  "))
						}
					}
				}
				for _, path := range keyPaths {
					for _, key := range badKeys {
						mutated.Add(1)
						undo := renameKey(d.obj, path, key)
						bad := invalidResources(t, boundaryMesh(t, docs, false))
						undo()
						if len(bad) > 0 {
							t.Errorf("%s %s %v renamed %q:\n  %s", d.ref.Kind, d.ref.Name, path, key, strings.Join(bad, "\n  "))
						}
					}
				}
				for _, path := range paths {
					orig := getPath(d.obj, path)
					for _, val := range boundaryValues(orig) {
						mutated.Add(1)
						setPath(d.obj, path, val)
						bad := invalidResources(t, boundaryMesh(t, docs, false))
						setPath(d.obj, path, orig)
						if len(bad) > 0 {
							t.Errorf("%s %s %v = %q:\n  %s", d.ref.Kind, d.ref.Name, path, fmt.Sprint(val), strings.Join(bad, "\n  "))
						}
					}
				}
			}
		})
	}
}

// TestInvalidValuesReported pins what the model makes of a VirtualService
// and a DestinationRule full of values Istio's webhook would refuse: each
// route or policy part a proxy would reject is left out and reported, and
// what remains validates (TestBoundaryValuesValidate reads the same file).
func TestInvalidValuesReported(t *testing.T) {
	m := manifestStore(t, filepath.Join("testdata", "invalid", "values.yaml")).Snapshot()
	want := []string{
		"c1/DestinationRule/app/web: trafficPolicy.connectionPool.tcp.connectTimeout: duration 0s is below 1ms: trafficPolicy.connectionPool ignored",
		"c1/DestinationRule/app/web: trafficPolicy.loadBalancer.consistentHash.httpHeaderName: header name is empty: trafficPolicy.loadBalancer ignored",
		"c1/DestinationRule/app/web: trafficPolicy.outlierDetection.interval: duration 0s is below 1ms: trafficPolicy.outlierDetection ignored",
		`c1/VirtualService/app/web: http[0].match[0].headers[bad header]: "bad header" is not a valid header name: route ignored`,
		"c1/VirtualService/app/web: http[1].match[0].uri.regex: error parsing regexp: missing closing ): `((` (RE2 syntax): route ignored",
		"c1/VirtualService/app/web: http[2].directResponse.status: HTTP status 42 is not in 200-599: route ignored",
		`c1/VirtualService/app/web: http[3].rewrite.uri: "bad\nvalue" holds a control character: route ignored`,
		"c1/VirtualService/app/web: http[4].route: the weights of the destinations sum to 0: route ignored",
		"c1/VirtualService/app/web: tcp[0].route: the weights of the destinations sum to 0: ignored",
	}
	var got []string
	for _, p := range m.Problems() {
		if !strings.Contains(p.Reason, "proxyless gRPC") {
			got = append(got, p.Object+": "+p.Reason)
		}
	}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	// Nothing of the DestinationRule that is valid is lost.
	c := msg[*clusterv3.Cluster](t, generate(t, m, Envoy, resource.ClusterType), "outbound|80||web.app.svc.cluster.local")
	if c.GetConnectTimeout().AsDuration() != ConnectTimeout || c.GetOutlierDetection() != nil || c.GetLbPolicy() == clusterv3.Cluster_RING_HASH {
		t.Errorf("cluster keeps an ignored setting: connect timeout %v, outlier detection %v, lb policy %v",
			c.GetConnectTimeout().AsDuration(), c.GetOutlierDetection(), c.GetLbPolicy())
	}
	if bad := invalidResources(t, m); len(bad) > 0 {
		t.Errorf("invalid resources:\n%s", strings.Join(bad, "\n"))
	}
}

// TestLoadChecksCatch: the checks the boundary test adds to Envoy's
// validation find what they look for.
func TestLoadChecksCatch(t *testing.T) {
	m := manifestStore(t, filepath.Join("testdata", "istio", "serviceentry.yaml")).Snapshot()
	sets := generateAll(t, m, Proxy{Generator: Envoy, Namespace: "default"})
	if bad := crossChecks(sets); len(bad) > 0 {
		t.Fatalf("generated sets fail the cross checks: %q", bad)
	}
	full := sets[resource.RouteType]
	sets[resource.RouteType] = &Set{}
	sets[resource.EndpointType] = &Set{}
	bad := crossChecks(sets)
	if !slices.ContainsFunc(bad, func(s string) bool { return strings.Contains(s, "names route configuration") }) ||
		!slices.ContainsFunc(bad, func(s string) bool { return strings.Contains(s, "names load assignment") }) {
		t.Errorf("missing routes and load assignments not reported: %q", bad)
	}
	rc := proto.Clone(msg[*routev3.RouteConfiguration](t, full, "80")).(*routev3.RouteConfiguration)
	rc.VirtualHosts[1].Domains = append(rc.VirtualHosts[1].Domains, rc.VirtualHosts[0].Domains[0])
	rc.VirtualHosts[1].Routes[0].GetRoute().ClusterSpecifier = &routev3.RouteAction_WeightedClusters{WeightedClusters: &routev3.WeightedCluster{
		Clusters: []*routev3.WeightedCluster_ClusterWeight{{Name: "a", Weight: wrapperspb.UInt32(0)}}}}
	rc.VirtualHosts[0].Routes[0].Match.PathSpecifier = &routev3.RouteMatch_SafeRegex{SafeRegex: &matcherv3.RegexMatcher{Regex: "(("}}
	if got := loadChecks(rc); len(got) != 3 {
		t.Errorf("load checks of a route configuration with a domain twice, a zero weight sum and a bad regex: %q", got)
	}
	rc.VirtualHosts[0].Routes[0].Match.PathSpecifier = &routev3.RouteMatch_PathSeparatedPrefix{PathSeparatedPrefix: "/a"}
	rc.VirtualHosts[0].Routes[0].GetRoute().RetryPolicy = &routev3.RetryPolicy{NumRetries: wrapperspb.UInt32(0)}
	if got := grpcChecks(rc); len(got) != 2 {
		t.Errorf("gRPC checks of a route with a path-separated prefix and no retries in its retry policy: %q", got)
	}
	rc.VirtualHosts[0].Routes[0].Match.Headers = []*routev3.HeaderMatcher{
		{Name: "x-a", HeaderMatchSpecifier: &routev3.HeaderMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: "a"}}}},
		{Name: "x-b", HeaderMatchSpecifier: &routev3.HeaderMatcher_PrefixMatch{}},
	}
	if got := grpcChecks(rc); len(got) != 4 {
		t.Errorf("gRPC checks of a route that also has a string_match header (pre-A63 clients refuse it) and an empty prefix_match: %q", got)
	}
	if got := grpcChecks(&clusterv3.Cluster{Name: "c", LbPolicy: clusterv3.Cluster_MAGLEV}); len(got) != 1 {
		t.Errorf("gRPC checks of a Maglev cluster: %q", got)
	}
}

// TestInvalidMeshDefaults: the mesh config's defaults a proxy would
// reject (a 0s retry backoff, a 0s connect timeout) are left out and
// reported, as in objects; before, every route or cluster carried them
// and every proxy rejected the whole type.
func TestInvalidMeshDefaults(t *testing.T) {
	cfg, err := meshconfig.Parse([]byte(`
defaultHttpRetryPolicy: {attempts: 3, backoff: 0s}
defaultInboundHttpRetryPolicy: {attempts: 2, perTryTimeout: 0.0005s}
defaultTrafficPolicy:
  connectionPool: {tcp: {connectTimeout: 0s}}
  outlierDetection: {consecutive5xxErrors: 5, interval: 30s}
`))
	if err != nil {
		t.Fatal(err)
	}
	m := manifestStore(t, filepath.Join("testdata", "retry", "retry.yaml"), model.WithMeshConfig(cfg)).Snapshot()
	if bad := invalidResources(t, m); len(bad) > 0 {
		t.Errorf("invalid resources:\n%s", strings.Join(bad, "\n"))
	}
	var got []string
	for _, p := range m.Problems() {
		if p.Object == model.MeshConfigObject {
			got = append(got, p.Reason)
		}
	}
	want := []string{
		"defaultHttpRetryPolicy.backoff: duration 0s is below 1ms: defaultHttpRetryPolicy ignored (Istio's built-in default applies)",
		"defaultInboundHttpRetryPolicy.perTryTimeout: duration 500µs is below 1ms: defaultInboundHttpRetryPolicy ignored (Istio's built-in default applies)",
		"defaultTrafficPolicy.connectionPool.tcp.connectTimeout: duration 0s is below 1ms: defaultTrafficPolicy.connectionPool ignored",
	}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("mesh config problems (-want +got):\n%s", diff)
	}
	// What is valid stays: the outlier detection of the default policy.
	c := msg[*clusterv3.Cluster](t, generate(t, m, Envoy, resource.ClusterType), "outbound|80||web.app.svc.cluster.local")
	if c.GetOutlierDetection().GetConsecutive_5Xx().GetValue() != 5 {
		t.Errorf("outlier detection %v, want the mesh default's consecutive 5xx 5", c.GetOutlierDetection())
	}
}
