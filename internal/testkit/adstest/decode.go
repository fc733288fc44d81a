package adstest

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"testing"

	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// Decode unmarshals every resource of resp into a new T, by name, and
// reports (as a test error) each one that fails ValidateAll.
func Decode[T proto.Message](t testing.TB, resp *discovery.DiscoveryResponse, newT func() T) map[string]T {
	t.Helper()
	out := make(map[string]T)
	for _, a := range resp.GetResources() {
		m := newT()
		if err := a.UnmarshalTo(m); err != nil {
			t.Fatalf("decode %s: %v", a.GetTypeUrl(), err)
		}
		if v, ok := any(m).(interface{ ValidateAll() error }); ok {
			if err := v.ValidateAll(); err != nil {
				t.Errorf("invalid %s: %v", a.GetTypeUrl(), err)
			}
		}
		out[cache.GetResourceName(m)] = m
	}
	return out
}

// EndpointsOf decodes every load assignment of an EDS response: cluster
// name → LBAddrs.
func EndpointsOf(resp *discovery.DiscoveryResponse) map[string][]string {
	out := map[string][]string{}
	for _, a := range resp.GetResources() {
		cla := &endpoint.ClusterLoadAssignment{}
		if a.UnmarshalTo(cla) == nil {
			out[cla.GetClusterName()] = LBAddrs(cla)
		}
	}
	return out
}

// LBAddrs lists a load assignment's endpoints as address:port, sorted.
func LBAddrs(cla *endpoint.ClusterLoadAssignment) []string {
	var out []string
	for _, l := range cla.GetEndpoints() {
		for _, e := range l.GetLbEndpoints() {
			sa := e.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
		}
	}
	sort.Strings(out)
	return out
}

// JSONStrings collects, sorted and unique, every string value under key
// in the resources of resp (their proto JSON) whose object keep accepts
// (nil: all): the tests' own way of finding what an Envoy subscribes to
// next, apart from the code that generates it.
func JSONStrings(t testing.TB, resp *discovery.DiscoveryResponse, key string, keep func(obj map[string]any) bool) []string {
	t.Helper()
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if s, ok := x[key].(string); ok && (keep == nil || keep(x)) {
				out = append(out, s)
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	for _, a := range resp.GetResources() {
		b, err := protojson.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		walk(v)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// EDSNames are the EDS clusters of a CDS response.
func EDSNames(t testing.TB, cds *discovery.DiscoveryResponse) []string {
	t.Helper()
	return JSONStrings(t, cds, "name", func(o map[string]any) bool { return o["type"] == "EDS" })
}

// RDSNames are the route configurations the listeners of an LDS response
// name.
func RDSNames(t testing.TB, lds *discovery.DiscoveryResponse) []string {
	t.Helper()
	return JSONStrings(t, lds, "routeConfigName", nil)
}
