package e2e

import (
	"context"
	"slices"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	matcher "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/pilotwire/pilotwire/internal/testkit/adstest"
	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

// headerMatchVS sends to subset v2 the calls that match a header in each
// way a VirtualService can (exact, prefix, regex, presence, and inverted
// by withoutHeaders; more adds its own matches), everything else to v1.
func headerMatchVS(more string) string {
	return `apiVersion: networking.istio.io/v1
kind: VirtualService
metadata: {name: echo, namespace: default}
spec:
  hosts: [echo]
  http:
  - name: v2
    match:
    - headers: {x-user: {exact: tester}}
    - headers: {x-team: {prefix: blue-}}
    - headers: {x-trace: {regex: "t[0-9]+"}}
    - headers: {x-canary: {}}
    - headers: {x-env: {exact: staging}}
      withoutHeaders: {x-stable: {}, x-region: {exact: eu}}
` + more + `    route:
    - destination: {host: echo, subset: v2}
  - name: v1
    route:
    - destination: {host: echo, subset: v1}
`
}

// TestGRPCHeaderMatches serves a VirtualService with header matches to
// proxyless gRPC clients, through the whole pipeline:
//   - grpc-go's real xDS client sends the calls that match to v2 and the
//     others to v1;
//   - a raw ADS client playing a gRPC client older than gRFC A63 (C-core
//     1.51: Python, C++, Ruby), which reads only the HeaderMatcher's own
//     fields and NACKs a route configuration holding string_match, accepts
//     every route of every route configuration it receives, before and
//     after an edit.
func TestGRPCHeaderMatches(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := t.TempDir()
	v1, v2 := startBackend(t, "backend-v1"), startBackend(t, "backend-v2")
	routedService(t, dir, "echo", map[string]int{"v1": v1.port, "v2": v2.port})
	pipelinetest.WriteFile(t, dir, "echo-rule.yaml", echoSubsets)
	pipelinetest.WriteFile(t, dir, "echo-vs.yaml", headerMatchVS(""))
	p := pipelinetest.Start(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()

	t.Run("grpc-go routes by header", func(t *testing.T) {
		echo := xdsDialer(t, p.ADSAddr)("xds:///echo.default.svc.cluster.local:8080")
		call := func(kv ...string) string {
			t.Helper()
			resp, err := echo.UnaryCall(metadata.AppendToOutgoingContext(ctx, kv...), &testgrpc.SimpleRequest{}, grpc.WaitForReady(true))
			if err != nil {
				t.Fatalf("call with headers %q: %v", kv, err)
			}
			return resp.GetHostname()
		}
		// The route is in place once tester reaches v2 20 times in a row.
		testutil.Eventually(t, "x-user: tester routed to v2", func() bool {
			for range 20 {
				if call("x-user", "tester") != "backend-v2" {
					return false
				}
			}
			return true
		})
		for _, tc := range []struct {
			name    string
			headers []string
			want    string
		}{
			{"exact", []string{"x-user", "tester"}, "backend-v2"},
			{"exact, another value", []string{"x-user", "other"}, "backend-v1"},
			{"prefix", []string{"x-team", "blue-7"}, "backend-v2"},
			{"prefix, another value", []string{"x-team", "red-7"}, "backend-v1"},
			{"regex", []string{"x-trace", "t42"}, "backend-v2"},
			{"regex matches the whole value", []string{"x-trace", "t42x"}, "backend-v1"},
			{"present", []string{"x-canary", "1"}, "backend-v2"},
			{"without headers", []string{"x-env", "staging", "x-region", "us"}, "backend-v2"},
			{"without headers, one present", []string{"x-env", "staging", "x-region", "us", "x-stable", "1"}, "backend-v1"},
			{"without headers, one equal", []string{"x-env", "staging", "x-region", "eu"}, "backend-v1"},
			{"no header", nil, "backend-v1"},
		} {
			for i := range 10 {
				if got := call(tc.headers...); got != tc.want {
					t.Errorf("%s: call %d with headers %q reached %s, want %s", tc.name, i, tc.headers, got, tc.want)
					break
				}
			}
		}
	})

	t.Run("a pre-A63 client reads every route", func(t *testing.T) {
		c := adstest.Dial(ctx, t, p.ADSAddr, "sidecar~10.244.0.9~client-1.default~default.svc.cluster.local")
		md, err := structpb.NewStruct(map[string]any{"GENERATOR": "grpc", "NAMESPACE": "default"})
		if err != nil {
			t.Fatal(err)
		}
		c.Node = &core.Node{Id: c.Node.GetId(), Metadata: md}
		const host = "echo.default.svc.cluster.local:8080"
		lds := c.Request(resource.ListenerType, host)
		rdsNames := adstest.RDSNames(t, lds)
		if diff := cmp.Diff([]string{host}, rdsNames); diff != "" {
			t.Fatalf("route configurations the listener names (-want +got):\n%s", diff)
		}
		c.Send(&discovery.DiscoveryRequest{TypeUrl: resource.RouteType, ResourceNames: rdsNames})
		// follow reads every response as the pre-A63 client would, ACKing
		// it (any header matcher the client refuses would NACK the whole
		// route configuration), until the route configuration of host has
		// the route matches want.
		follow := func(what string, want []*route.RouteMatch) {
			t.Helper()
			for {
				switch r := recvAny(ctx, t, c); r.GetTypeUrl() {
				case resource.ListenerType:
					if diff := cmp.Diff(rdsNames, adstest.RDSNames(t, r)); diff != "" {
						t.Fatalf("%s: route configurations the listener names (-want +got):\n%s", what, diff)
					}
					c.ACK(r, host)
				case resource.RouteType:
					routes := adstest.Decode(t, r, func() *route.RouteConfiguration { return &route.RouteConfiguration{} })
					if len(routes) == 0 {
						t.Fatalf("%s: an RDS response with no route configuration", what)
					}
					for name, rc := range routes {
						if bad := adstest.PreA63RouteErrors(rc); len(bad) > 0 {
							t.Fatalf("%s: a pre-A63 gRPC client NACKs route configuration %s:\n  %s", what, name, strings.Join(bad, "\n  "))
						}
					}
					c.ACK(r, rdsNames...)
					rc, ok := routes[host]
					if !ok {
						continue
					}
					diff := cmp.Diff(want, matchesOf(rc), protocmp.Transform())
					if diff == "" {
						return
					}
					t.Logf("%s: route matches of %s, not yet the ones wanted (-want +got):\n%s", what, host, diff)
				default:
					t.Fatalf("%s: a response of type %s, not subscribed to", what, r.GetTypeUrl())
				}
			}
		}

		// The fields every gRPC client reads, deprecated for Envoy.
		exact := func(name, v string) *route.HeaderMatcher {
			//lint:ignore SA1019 pre-A63 gRPC clients read only the deprecated fields
			return &route.HeaderMatcher{Name: name, HeaderMatchSpecifier: &route.HeaderMatcher_ExactMatch{ExactMatch: v}}
		}
		prefix := func(name, v string) *route.HeaderMatcher {
			//lint:ignore SA1019 pre-A63 gRPC clients read only the deprecated fields
			return &route.HeaderMatcher{Name: name, HeaderMatchSpecifier: &route.HeaderMatcher_PrefixMatch{PrefixMatch: v}}
		}
		regex := func(name, v string) *route.HeaderMatcher {
			//lint:ignore SA1019 pre-A63 gRPC clients read only the deprecated fields
			return &route.HeaderMatcher{Name: name, HeaderMatchSpecifier: &route.HeaderMatcher_SafeRegexMatch{SafeRegexMatch: &matcher.RegexMatcher{Regex: v}}}
		}
		present := func(name string) *route.HeaderMatcher {
			return &route.HeaderMatcher{Name: name, HeaderMatchSpecifier: &route.HeaderMatcher_PresentMatch{PresentMatch: true}}
		}
		withHeaders := func(hs ...*route.HeaderMatcher) *route.RouteMatch {
			return &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}, CaseSensitive: wrapperspb.Bool(true), Headers: hs}
		}
		inverted := func(h *route.HeaderMatcher, missingEmpty bool) *route.HeaderMatcher {
			h.InvertMatch, h.TreatMissingHeaderAsEmpty = true, missingEmpty
			return h
		}
		v2 := []*route.RouteMatch{
			withHeaders(exact("x-user", "tester")),
			withHeaders(prefix("x-team", "blue-")),
			withHeaders(regex("x-trace", "t[0-9]+")),
			withHeaders(present("x-canary")),
			withHeaders(exact("x-env", "staging"), inverted(exact("x-region", "eu"), true), inverted(present("x-stable"), false)),
		}
		catchAll := &route.RouteMatch{PathSpecifier: &route.RouteMatch_Prefix{Prefix: "/"}}
		follow("before the edit", append(slices.Clone(v2), catchAll))

		// An edit is read the same way: a method match joins.
		pipelinetest.WriteFile(t, dir, "echo-vs.yaml", headerMatchVS("    - method: {exact: POST}\n"))
		follow("after the edit", append(slices.Clone(v2), withHeaders(exact(":method", "POST")), catchAll))
		if n := p.Metric(t, "fe-0", "pilot_total_xds_rejects"); n != 0 {
			t.Errorf("clients rejected %v responses", n)
		}
	})
}

// matchesOf lists the route matches of rc's virtual hosts, in order.
func matchesOf(rc *route.RouteConfiguration) []*route.RouteMatch {
	var out []*route.RouteMatch
	for _, vh := range rc.GetVirtualHosts() {
		for _, r := range vh.GetRoutes() {
			out = append(out, r.GetMatch())
		}
	}
	return out
}
