package xdsgen

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	previousprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
	"github.com/pilotwire/pilotwire/pkg/model"
)

// retryStore is testdata/retry/retry.yaml under the mesh config mc.
func retryStore(t *testing.T, mc string) *model.Mesh {
	t.Helper()
	cfg, err := meshconfig.Parse([]byte(mc))
	if err != nil {
		t.Fatal(err)
	}
	return manifestStore(t, filepath.Join("testdata", "retry", "retry.yaml"), model.WithMeshConfig(cfg)).Snapshot()
}

// outboundRetry is the retry policy of the route named route in the
// virtual host for host on port 80 of the sidecar's route configuration
// "80" (nil: none), after checking the configuration with ValidateAll.
func outboundRetry(t *testing.T, m *model.Mesh, host, route string) *routev3.RetryPolicy {
	t.Helper()
	set, err := GenerateFor(m, Proxy{Generator: Envoy, Namespace: "app", IP: "10.0.0.1"}, resource.RouteType)
	if err != nil {
		t.Fatal(err)
	}
	r := set.Get("80")
	if r == nil {
		t.Fatal("no route configuration 80")
	}
	if err := validateDeep(r.Msg); err != nil {
		t.Fatal(err)
	}
	for _, vh := range r.Msg.(*routev3.RouteConfiguration).GetVirtualHosts() {
		if vh.GetName() != host+":80" {
			continue
		}
		for _, rt := range vh.GetRoutes() {
			if rt.GetName() == route {
				return rt.GetRoute().GetRetryPolicy()
			}
		}
	}
	t.Fatalf("no route %q for %s:80", route, host)
	return nil
}

// inboundRetry is the retry policy of the inbound route of the sidecar's
// filter chain named chain on virtualInbound.
func inboundRetry(t *testing.T, m *model.Mesh, chain string) *routev3.RetryPolicy {
	t.Helper()
	set, err := GenerateFor(m, Proxy{Generator: Envoy, Namespace: "app", IP: "10.0.0.1"}, resource.ListenerType)
	if err != nil {
		t.Fatal(err)
	}
	l := set.Get(VirtualInboundListener)
	if l == nil {
		t.Fatal("no virtualInbound listener")
	}
	if err := validateDeep(l.Msg); err != nil {
		t.Fatal(err)
	}
	for _, fc := range l.Msg.(*listenerv3.Listener).GetFilterChains() {
		if fc.GetName() != chain {
			continue
		}
		for _, f := range fc.GetFilters() {
			if f.GetName() != hcmFilterName {
				continue
			}
			hcm := unpack[*hcmv3.HttpConnectionManager](t, f.GetTypedConfig())
			return hcm.GetRouteConfig().GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetRetryPolicy()
		}
	}
	t.Fatalf("no HTTP filter chain %q", chain)
	return nil
}

// grpcRetry is the retry policy of the first route of a proxyless gRPC
// client's route configuration for target.
func grpcRetry(t *testing.T, m *model.Mesh, target string) *routev3.RetryPolicy {
	t.Helper()
	set, err := GenerateFor(m, Proxy{Generator: GRPC, Namespace: "app"}, resource.RouteType)
	if err != nil {
		t.Fatal(err)
	}
	r := set.Get(target)
	if r == nil {
		t.Fatalf("no route configuration %s", target)
	}
	return r.Msg.(*routev3.RouteConfiguration).GetVirtualHosts()[0].GetRoutes()[0].GetRoute().GetRetryPolicy()
}

func retryWant(t *testing.T, n uint32, on string, codes []uint32, hostAttempts int64, prevHosts bool) *routev3.RetryPolicy {
	p := &routev3.RetryPolicy{NumRetries: wrapperspb.UInt32(n), RetryOn: on, RetriableStatusCodes: codes, HostSelectionRetryMaxAttempts: hostAttempts}
	if prevHosts {
		p.RetryHostPredicate = []*routev3.RetryPolicy_RetryHostPredicate{{
			Name:       "envoy.retry_host_predicates.previous_hosts",
			ConfigType: &routev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: mustAnyTest(t, &previoushostsv3.PreviousHostsPredicate{})},
		}}
	}
	return p
}

// TestDefaultRetries: routes that set no retries get Istio's: outbound
// (the mesh's defaultHttpRetryPolicy, else 2 retries on connection
// failures and refused streams, other hosts preferred unless one hashed
// destination), inbound (2 retries on reset-before-request, none on gRPC
// ports, the mesh's defaultInboundHttpRetryPolicy), and proxyless gRPC
// (the fields grpc-go reads); attempts 0 turns them off.
func TestDefaultRetries(t *testing.T) {
	const on = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"
	istio := retryWant(t, 2, on, nil, 5, true)
	hashed := retryWant(t, 2, on, nil, 5, false)
	inbound := &routev3.RetryPolicy{NumRetries: wrapperspb.UInt32(2), RetryOn: "reset-before-request"}
	own := retryWant(t, 4, "gateway-error,retriable-status-codes", []uint32{503}, 5, true)
	own.RetryPriority = &routev3.RetryPolicy_RetryPriority{
		Name:       "envoy.retry_priorities.previous_priorities",
		ConfigType: &routev3.RetryPolicy_RetryPriority_TypedConfig{TypedConfig: mustAnyTest(t, &previousprioritiesv3.PreviousPrioritiesConfig{UpdateFrequency: 2})},
	}
	meshWide := retryWant(t, 5, "5xx", nil, 5, true)
	meshWide.PerTryTimeout = durationpb.New(2e9)
	const meshPolicy = "defaultHttpRetryPolicy: {attempts: 5, retryOn: 5xx, perTryTimeout: 2s}"
	const off = "defaultHttpRetryPolicy: {attempts: 0}\ndefaultInboundHttpRetryPolicy: {attempts: 0}"
	const inboundPolicy = "defaultInboundHttpRetryPolicy: {attempts: 3, retryOn: \"reset,503\", backoff: 1s}"
	inboundOwn := &routev3.RetryPolicy{NumRetries: wrapperspb.UInt32(3), RetryOn: "reset,retriable-status-codes", RetriableStatusCodes: []uint32{503},
		RetryBackOff: &routev3.RetryPolicy_RetryBackOff{BaseInterval: durationpb.New(1e9)}}

	type check struct {
		name string
		got  func(*testing.T, *model.Mesh) *routev3.RetryPolicy
		want *routev3.RetryPolicy
	}
	out := func(host, route string) func(*testing.T, *model.Mesh) *routev3.RetryPolicy {
		return func(t *testing.T, m *model.Mesh) *routev3.RetryPolicy { return outboundRetry(t, m, host, route) }
	}
	in := func(chain string) func(*testing.T, *model.Mesh) *routev3.RetryPolicy {
		return func(t *testing.T, m *model.Mesh) *routev3.RetryPolicy { return inboundRetry(t, m, chain) }
	}
	grpc := func(target string) func(*testing.T, *model.Mesh) *routev3.RetryPolicy {
		return func(t *testing.T, m *model.Mesh) *routev3.RetryPolicy { return grpcRetry(t, m, target) }
	}
	for _, tc := range []struct {
		mesh   string
		checks []check
	}{
		{"", []check{
			{"a service's default route", out("web.app.svc.cluster.local", "default"), istio},
			{"a hashed service's default route keeps other hosts preferred", out("ring.app.svc.cluster.local", "default"), istio},
			{"a VirtualService route without retries", out("routed.app.svc.cluster.local", "unset"), istio},
			{"one hashed destination", out("sticky.app.svc.cluster.local", "one"), hashed},
			{"a split with a hashed destination", out("sticky.app.svc.cluster.local", "split"), istio},
			{"the route's own retries", out("routed.app.svc.cluster.local", "own"), own},
			{"attempts 0", out("routed.app.svc.cluster.local", "disabled"), nil},
			{"inbound http", in("0.0.0.0_8080"), inbound},
			{"inbound grpc", in("0.0.0.0_9090"), nil},
			{"inbound passthrough", in(VirtualInboundListener + "-catchall-http"), inbound},
			{"proxyless gRPC default route", grpc("web.app.svc.cluster.local:80"), &routev3.RetryPolicy{NumRetries: wrapperspb.UInt32(2), RetryOn: on}},
		}},
		{meshPolicy, []check{
			{"a service's default route", out("web.app.svc.cluster.local", "default"), meshWide},
			{"a VirtualService route without retries", out("routed.app.svc.cluster.local", "unset"), meshWide},
			{"the route's own retries win", out("routed.app.svc.cluster.local", "own"), own},
			{"inbound unchanged", in("0.0.0.0_8080"), inbound},
			{"proxyless gRPC default route", grpc("web.app.svc.cluster.local:80"), &routev3.RetryPolicy{NumRetries: wrapperspb.UInt32(5), RetryOn: "5xx"}},
		}},
		{off, []check{
			{"a service's default route", out("web.app.svc.cluster.local", "default"), nil},
			{"a VirtualService route without retries", out("routed.app.svc.cluster.local", "unset"), nil},
			{"the route's own retries", out("routed.app.svc.cluster.local", "own"), own},
			{"inbound http", in("0.0.0.0_8080"), nil},
			{"proxyless gRPC default route", grpc("web.app.svc.cluster.local:80"), nil},
		}},
		{inboundPolicy, []check{
			{"inbound http", in("0.0.0.0_8080"), inboundOwn},
			{"inbound grpc", in("0.0.0.0_9090"), nil},
			{"outbound unchanged", out("web.app.svc.cluster.local", "default"), istio},
		}},
	} {
		m := retryStore(t, tc.mesh)
		for _, c := range tc.checks {
			t.Run(fmt.Sprintf("%q/%s", tc.mesh, c.name), func(t *testing.T) {
				if diff := cmp.Diff(c.want, c.got(t, m), protocmp.Transform()); diff != "" {
					t.Errorf("retry policy (-want +got):\n%s", diff)
				}
			})
		}
	}
}

// TestDefaultRetriesShared: the built-in default policies are one value
// for every route, and nothing that builds a route changes them.
func TestDefaultRetriesShared(t *testing.T) {
	before := []*routev3.RetryPolicy{proto.Clone(defaultRetry).(*routev3.RetryPolicy), proto.Clone(defaultHashedRetry).(*routev3.RetryPolicy),
		proto.Clone(defaultGRPCRetry).(*routev3.RetryPolicy), proto.Clone(defaultInbound).(*routev3.RetryPolicy)}
	m := retryStore(t, "")
	a := outboundRetry(t, m, "web.app.svc.cluster.local", "default")
	b := outboundRetry(t, m, "routed.app.svc.cluster.local", "unset")
	if a != b || a != defaultRetry {
		t.Errorf("the default routes' policies are not the shared default")
	}
	for _, typeURL := range []string{resource.RouteType, resource.ListenerType} {
		for _, p := range []Proxy{{Generator: Envoy, Namespace: "app", IP: "10.0.0.1"}, {Generator: GRPC, Namespace: "app"}} {
			if _, err := GenerateFor(m, p, typeURL); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i, p := range []*routev3.RetryPolicy{defaultRetry, defaultHashedRetry, defaultGRPCRetry, defaultInbound} {
		if diff := cmp.Diff(before[i], p, protocmp.Transform()); diff != "" {
			t.Errorf("default %d changed (-before +after):\n%s", i, diff)
		}
	}
}

// TestRequestAttemptCount: every virtual host of a sidecar's outbound
// route configurations and of a router's sets include_request_attempt_count
// (x-envoy-attempt-count on upstream requests, as Istio's default proxy
// headers), but for a router's blackhole, which routes nothing.
func TestRequestAttemptCount(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "*", "*.yaml"))
	if err != nil || len(inputs) < 10 {
		t.Fatalf("inputs %v: %v", inputs, err)
	}
	seen := map[NodeType]int{}
	for _, in := range inputs {
		m := manifestStore(t, in).Snapshot()
		for _, p := range []Proxy{
			{Generator: Envoy, Namespace: "app", IP: "10.0.0.1"},
			{Generator: Envoy, Type: Router, Namespace: "istio-system", Labels: map[string]string{"istio": "ingressgateway"}},
		} {
			set, err := GenerateFor(m, p, resource.RouteType)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, r := range set.Resources {
				for _, vh := range r.Msg.(*routev3.RouteConfiguration).GetVirtualHosts() {
					if strings.HasPrefix(vh.GetName(), "blackhole:") {
						continue
					}
					n++
					if !vh.GetIncludeRequestAttemptCount() {
						t.Errorf("%s, %v proxy: route configuration %s, virtual host %s: no include_request_attempt_count", in, p.Type, r.Name, vh.GetName())
					}
				}
			}
			seen[p.Type] += n
		}
	}
	if seen[Sidecar] == 0 || seen[Router] == 0 {
		t.Errorf("virtual hosts seen: %v, want some of each", seen)
	}
}
