package xdsgen

import (
	"net/http"
	"strconv"
	"strings"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	previoushostsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3"
	previousprioritiesv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/priority/previous_priorities/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// Retries, as Istio sets them (its route/retry package):
//   - An outbound HTTP route takes its VirtualService route's retries, else
//     the mesh config's defaultHttpRetryPolicy, else the built-in default:
//     2 retries on connect-failure, refused-stream, unavailable, cancelled
//     and retriable-status-codes (no codes listed: the 503 default went
//     with Istio 1.24), 5 host selection attempts, and the previous_hosts
//     predicate unless the route hashes to one destination (consistent
//     hashing should land on the same host again).
//   - A policy that is set starts from that default and overrides what it
//     sets; attempts 0 turns retries off.
//   - A sidecar's inbound route to its application retries twice on
//     reset-before-request (a request the application's connection reset
//     before any of it was processed), unless the port is gRPC, where that
//     condition misbehaves for streams; defaultInboundHttpRetryPolicy
//     overrides attempts, retryOn and backoff.
//   - Proxyless gRPC gets what grpc-go reads of the same policy: retry_on
//     (the gRPC codes among it), num_retries and the back-off.

// defaultRetryOn is Istio's retry_on for a policy that sets no retryOn.
const defaultRetryOn = "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes"

// defaultInboundRetryOn is Istio's retry_on for inbound routes.
const defaultInboundRetryOn = "reset-before-request"

var previousHosts = []*routev3.RetryPolicy_RetryHostPredicate{{
	Name:       "envoy.retry_host_predicates.previous_hosts",
	ConfigType: &routev3.RetryPolicy_RetryHostPredicate_TypedConfig{TypedConfig: mustAny(&previoushostsv3.PreviousHostsPredicate{})},
}}

// previousPriorities is what retryRemoteLocalities asks for: each retry
// goes to the next priority (locality) (Istio's update frequency of 2).
var previousPriorities = &routev3.RetryPolicy_RetryPriority{
	Name: "envoy.retry_priorities.previous_priorities",
	ConfigType: &routev3.RetryPolicy_RetryPriority_TypedConfig{
		TypedConfig: mustAny(&previousprioritiesv3.PreviousPrioritiesConfig{UpdateFrequency: 2}),
	},
}

// The built-in defaults, shared by every route that has them. Read-only.
var (
	defaultRetry       = &routev3.RetryPolicy{NumRetries: wrapperspb.UInt32(2), RetryOn: defaultRetryOn, HostSelectionRetryMaxAttempts: 5, RetryHostPredicate: previousHosts}
	defaultHashedRetry = &routev3.RetryPolicy{NumRetries: wrapperspb.UInt32(2), RetryOn: defaultRetryOn, HostSelectionRetryMaxAttempts: 5}
	defaultGRPCRetry   = &routev3.RetryPolicy{NumRetries: wrapperspb.UInt32(2), RetryOn: defaultRetryOn}
	defaultInbound     = &routev3.RetryPolicy{NumRetries: wrapperspb.UInt32(2), RetryOn: defaultInboundRetryOn}
)

// retryPolicy is an outbound route's retry policy: in's, else the mesh's
// default, else Istio's; nil when attempts is 0. hashed is a route to a
// single destination with consistent hashing; grpc keeps what grpc-go reads.
func retryPolicy(m *model.Mesh, in *networkingv1.HTTPRetry, hashed, grpc bool) *routev3.RetryPolicy {
	if in == nil {
		in = m.DefaultHTTPRetryPolicy()
	}
	if in == nil {
		switch {
		case grpc:
			return defaultGRPCRetry
		case hashed:
			return defaultHashedRetry
		}
		return defaultRetry
	}
	out := baseRetry(in, defaultRetryOn)
	if out == nil || grpc {
		return out
	}
	out.HostSelectionRetryMaxAttempts = 5
	out.PerTryTimeout = in.GetPerTryTimeout()
	ignore := !hashed
	if in.GetRetryIgnorePreviousHosts() != nil {
		ignore = in.GetRetryIgnorePreviousHosts().GetValue()
	}
	if ignore {
		out.RetryHostPredicate = previousHosts
	}
	if in.GetRetryRemoteLocalities().GetValue() {
		out.RetryPriority = previousPriorities
	}
	return out
}

// inboundRetryPolicy is a sidecar's inbound route's retry policy: none on
// gRPC ports, else the mesh's defaultInboundHttpRetryPolicy (attempts,
// retryOn, backoff: the rest means nothing towards the one local
// application), else Istio's default; nil when attempts is 0.
func inboundRetryPolicy(m *model.Mesh, grpc bool) *routev3.RetryPolicy {
	if grpc {
		return nil
	}
	in := m.DefaultInboundHTTPRetryPolicy()
	if in == nil {
		return defaultInbound
	}
	return baseRetry(in, defaultInboundRetryOn)
}

// baseRetry is in's attempts, retryOn (else on) and backoff; nil when
// attempts is 0.
func baseRetry(in *networkingv1.HTTPRetry, on string) *routev3.RetryPolicy {
	if in.GetAttempts() <= 0 {
		return nil
	}
	out := &routev3.RetryPolicy{NumRetries: wrapperspb.UInt32(uint32(in.GetAttempts())), RetryOn: on}
	setRetryOn(out, in.GetRetryOn())
	if in.GetBackoff() != nil {
		out.RetryBackOff = &routev3.RetryPolicy_RetryBackOff{BaseInterval: in.GetBackoff()}
	}
	return out
}

// setRetryOn sets Istio's retryOn, when given, as Envoy's conditions and
// retriable status codes, adding retriable-status-codes when it lists
// codes without it.
func setRetryOn(out *routev3.RetryPolicy, retryOn string) {
	if retryOn == "" {
		return
	}
	out.RetryOn, out.RetriableStatusCodes = parseRetryOn(retryOn)
	if len(out.RetriableStatusCodes) > 0 && !strings.Contains(out.RetryOn, "retriable-status-codes") {
		out.RetryOn += ",retriable-status-codes"
	}
}

// parseRetryOn splits Istio's retryOn into Envoy's conditions and
// retriable status codes: the parts that are HTTP status codes.
func parseRetryOn(s string) (string, []uint32) {
	var on []string
	var codes []uint32
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if n, err := strconv.Atoi(p); err == nil && http.StatusText(n) != "" {
			codes = append(codes, uint32(n))
			continue
		}
		on = append(on, p)
	}
	return strings.Join(on, ","), codes
}
