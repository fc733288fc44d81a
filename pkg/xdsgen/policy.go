package xdsgen

import (
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	httpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"
)

// DestinationRule traffic policies, translated as Istio's cluster builder
// translates them (networking/core/cluster_traffic_policy.go) for sidecars
// and as its grpcgen does for proxyless gRPC.

// defaultRingSize is Envoy's (and Istio's) minimum ring size when a
// consistent hash sets none.
const defaultRingSize = 1024

// transportSocketTLS names the TLS transport socket (gRPC requires exactly
// this name).
const transportSocketTLS = "envoy.transport_sockets.tls"

// applyLoadBalancer sets the cluster's policy: ROUND_ROBIN, LEAST_REQUEST
// (also for the deprecated LEAST_CONN, and Istio's default), RANDOM,
// PASSTHROUGH (original destination), and a consistent hash as RING_HASH
// (or MAGLEV). Original destination clusters keep CLUSTER_PROVIDED.
func applyLoadBalancer(c *clusterv3.Cluster, lb *networkingv1.LoadBalancerSettings) {
	if c.GetType() == clusterv3.Cluster_ORIGINAL_DST {
		c.LbPolicy = clusterv3.Cluster_CLUSTER_PROVIDED
		return
	}
	switch lb.GetSimple() {
	case networkingv1.LoadBalancerSettings_ROUND_ROBIN:
		c.LbPolicy = clusterv3.Cluster_ROUND_ROBIN
	case networkingv1.LoadBalancerSettings_RANDOM:
		c.LbPolicy = clusterv3.Cluster_RANDOM
	case networkingv1.LoadBalancerSettings_PASSTHROUGH:
		c.ClusterDiscoveryType = &clusterv3.Cluster_Type{Type: clusterv3.Cluster_ORIGINAL_DST}
		c.LbPolicy = clusterv3.Cluster_CLUSTER_PROVIDED
		c.EdsClusterConfig = nil
		c.LoadAssignment = nil
		return
	default:
		c.LbPolicy = clusterv3.Cluster_LEAST_REQUEST
	}
	applyConsistentHash(c, lb)
}

// applyConsistentHash makes a cluster with a consistent hash RING_HASH
// (Istio's ApplyRingHashLoadBalancer).
func applyConsistentHash(c *clusterv3.Cluster, lb *networkingv1.LoadBalancerSettings) {
	ch := lb.GetConsistentHash()
	if ch == nil {
		return
	}
	switch {
	case ch.GetMaglev() != nil:
		c.LbPolicy = clusterv3.Cluster_MAGLEV
		if n := ch.GetMaglev().GetTableSize(); n != 0 {
			c.LbConfig = &clusterv3.Cluster_MaglevLbConfig_{MaglevLbConfig: &clusterv3.Cluster_MaglevLbConfig{TableSize: wrapperspb.UInt64(n)}}
		}
	case ch.GetRingHash() != nil:
		c.LbPolicy = clusterv3.Cluster_RING_HASH
		if n := ch.GetRingHash().GetMinimumRingSize(); n != 0 {
			c.LbConfig = &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: &clusterv3.Cluster_RingHashLbConfig{MinimumRingSize: wrapperspb.UInt64(n)}}
		}
	default:
		n := uint64(defaultRingSize)
		//lint:ignore SA1019 the deprecated field still applies, as in Istio
		if m := ch.GetMinimumRingSize(); m != 0 {
			n = m
		}
		c.LbPolicy = clusterv3.Cluster_RING_HASH
		c.LbConfig = &clusterv3.Cluster_RingHashLbConfig_{RingHashLbConfig: &clusterv3.Cluster_RingHashLbConfig{MinimumRingSize: wrapperspb.UInt64(n)}}
	}
}

// hashPolicy is the route's hash policy for a consistent hash: by header,
// cookie, source IP or query parameter (Istio's ConsistentHashToHashPolicy).
// nil without one.
func hashPolicy(ch *networkingv1.LoadBalancerSettings_ConsistentHashLB) []*routev3.RouteAction_HashPolicy {
	var p *routev3.RouteAction_HashPolicy
	switch ch.GetHashKey().(type) {
	case *networkingv1.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName:
		p = &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_Header_{
			Header: &routev3.RouteAction_HashPolicy_Header{HeaderName: ch.GetHttpHeaderName()},
		}}
	case *networkingv1.LoadBalancerSettings_ConsistentHashLB_HttpCookie:
		ck := ch.GetHttpCookie()
		cookie := &routev3.RouteAction_HashPolicy_Cookie{Name: ck.GetName(), Ttl: ck.GetTtl(), Path: ck.GetPath()}
		for _, a := range ck.GetAttributes() {
			cookie.Attributes = append(cookie.Attributes, &routev3.RouteAction_HashPolicy_CookieAttribute{Name: a.GetName(), Value: a.GetValue()})
		}
		p = &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_Cookie_{Cookie: cookie}}
	case *networkingv1.LoadBalancerSettings_ConsistentHashLB_UseSourceIp:
		p = &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_ConnectionProperties_{
			ConnectionProperties: &routev3.RouteAction_HashPolicy_ConnectionProperties{SourceIp: ch.GetUseSourceIp()},
		}}
	case *networkingv1.LoadBalancerSettings_ConsistentHashLB_HttpQueryParameterName:
		p = &routev3.RouteAction_HashPolicy{PolicySpecifier: &routev3.RouteAction_HashPolicy_QueryParameter_{
			QueryParameter: &routev3.RouteAction_HashPolicy_QueryParameter{Name: ch.GetHttpQueryParameterName()},
		}}
	default:
		return nil
	}
	return []*routev3.RouteAction_HashPolicy{p}
}

// grpcHashPolicy is the hash policies gRPC honours: a header (gRPC ignores
// cookies, query parameters and source IPs: a call without a policy it
// understands hashes randomly).
func grpcHashPolicy(ch *networkingv1.LoadBalancerSettings_ConsistentHashLB) []*routev3.RouteAction_HashPolicy {
	if _, ok := ch.GetHashKey().(*networkingv1.LoadBalancerSettings_ConsistentHashLB_HttpHeaderName); !ok {
		return nil
	}
	return hashPolicy(ch)
}

// envoyTrafficPolicy applies a traffic policy (nil: Istio's defaults) to
// an outbound sidecar cluster of a port with protocol proto.
func envoyTrafficPolicy(c *clusterv3.Cluster, tp *networkingv1.TrafficPolicy, proto protocol) {
	opts := applyConnectionPool(c, tp.GetConnectionPool(), proto)
	applyOutlierDetection(c, tp.GetOutlierDetection())
	applyLoadBalancer(c, tp.GetLoadBalancer())
	if ts := transportSocket(tp.GetTls()); ts != nil {
		c.TransportSocket = ts
		opts = withAutoSNI(opts, tp.GetTls(), proto)
	}
	if opts != nil {
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{httpOptionsKey: mustAny(opts)}
	}
}

// withAutoSNI adds to a cluster's HTTP options (nil: the port's defaults)
// what Istio sets on clusters originating TLS from files (SIMPLE, MUTUAL)
// whose rule names no sni: auto_sni (the SNI is the request's host, or the
// host the client connected to), and auto_san_validation (the certificate
// must match that host) unless the rule names subjectAltNames or skips
// verification. Envoy reads them on TCP ports too.
func withAutoSNI(opts *httpv3.HttpProtocolOptions, t *networkingv1.ClientTLSSettings, proto protocol) *httpv3.HttpProtocolOptions {
	if t.GetSni() != "" {
		return opts
	}
	if opts == nil {
		opts = &httpv3.HttpProtocolOptions{}
		switch proto {
		case protoHTTP2:
			opts.UpstreamProtocolOptions = explicitHTTP2(&corev3.Http2ProtocolOptions{})
		case protoAuto:
			opts.UpstreamProtocolOptions = useDownstream()
		default: // HTTP/1.1, and TCP ports (Envoy ignores the protocol there)
			opts.UpstreamProtocolOptions = explicitHTTP1()
		}
	}
	opts.UpstreamHttpProtocolOptions = &corev3.UpstreamHttpProtocolOptions{
		AutoSni:           true,
		AutoSanValidation: len(t.GetSubjectAltNames()) == 0 && !t.GetInsecureSkipVerify().GetValue(),
	}
	return opts
}

func explicitHTTP1() *httpv3.HttpProtocolOptions_ExplicitHttpConfig_ {
	return &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
		ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_HttpProtocolOptions{HttpProtocolOptions: &corev3.Http1ProtocolOptions{}},
	}}
}

func explicitHTTP2(h2 *corev3.Http2ProtocolOptions) *httpv3.HttpProtocolOptions_ExplicitHttpConfig_ {
	return &httpv3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig{
		ProtocolConfig: &httpv3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: h2},
	}}
}

// applyConnectionPool sets the circuit breakers (Istio's defaults are the
// maximum) and returns the HTTP options the HTTP and TCP connection
// settings need (nil: none; the cluster keeps the port's defaults).
func applyConnectionPool(c *clusterv3.Cluster, cp *networkingv1.ConnectionPoolSettings, proto protocol) *httpv3.HttpProtocolOptions {
	th := defaultCircuitBreakers().Thresholds[0]
	if h := cp.GetHttp(); h != nil {
		if h.GetHttp2MaxRequests() > 0 {
			th.MaxRequests = wrapperspb.UInt32(uint32(h.GetHttp2MaxRequests()))
		}
		if h.GetHttp1MaxPendingRequests() > 0 {
			th.MaxPendingRequests = wrapperspb.UInt32(uint32(h.GetHttp1MaxPendingRequests()))
		}
		if h.GetMaxRetries() > 0 {
			th.MaxRetries = wrapperspb.UInt32(uint32(h.GetMaxRetries()))
		}
	}
	if t := cp.GetTcp(); t != nil {
		if t.GetMaxConnections() > 0 {
			th.MaxConnections = wrapperspb.UInt32(uint32(t.GetMaxConnections()))
		}
		if t.GetConnectTimeout() != nil {
			c.ConnectTimeout = t.GetConnectTimeout()
		}
		if ka := t.GetTcpKeepalive(); ka != nil {
			k := &corev3.TcpKeepalive{}
			if ka.GetProbes() > 0 {
				k.KeepaliveProbes = wrapperspb.UInt32(ka.GetProbes())
			}
			if ka.GetTime() != nil {
				k.KeepaliveTime = wrapperspb.UInt32(uint32(ka.GetTime().AsDuration().Seconds()))
			}
			if ka.GetInterval() != nil {
				k.KeepaliveInterval = wrapperspb.UInt32(uint32(ka.GetInterval().AsDuration().Seconds()))
			}
			c.UpstreamConnectionOptions = &clusterv3.UpstreamConnectionOptions{TcpKeepalive: k}
		}
	}
	c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{th}}

	h, t := cp.GetHttp(), cp.GetTcp()
	idle := h.GetIdleTimeout()
	if idle == nil {
		idle = t.GetIdleTimeout()
	}
	upgrade := proto == protoHTTP && h.GetH2UpgradePolicy() == networkingv1.ConnectionPoolSettings_HTTPSettings_UPGRADE
	if idle == nil && h.GetMaxRequestsPerConnection() == 0 && t.GetMaxConnectionDuration() == nil &&
		h.GetMaxConcurrentStreams() == 0 && !upgrade {
		return nil
	}
	common := &corev3.HttpProtocolOptions{IdleTimeout: idle, MaxConnectionDuration: t.GetMaxConnectionDuration()}
	if n := h.GetMaxRequestsPerConnection(); n > 0 {
		common.MaxRequestsPerConnection = wrapperspb.UInt32(uint32(n))
	}
	h2 := &corev3.Http2ProtocolOptions{}
	if n := h.GetMaxConcurrentStreams(); n > 0 {
		h2.MaxConcurrentStreams = wrapperspb.UInt32(uint32(n))
	}
	opts := &httpv3.HttpProtocolOptions{CommonHttpProtocolOptions: common}
	switch {
	case proto == protoHTTP2 || upgrade:
		opts.UpstreamProtocolOptions = explicitHTTP2(h2)
	case proto == protoAuto:
		opts.UpstreamProtocolOptions = &httpv3.HttpProtocolOptions_UseDownstreamProtocolConfig{
			UseDownstreamProtocolConfig: &httpv3.HttpProtocolOptions_UseDownstreamHttpConfig{
				HttpProtocolOptions: &corev3.Http1ProtocolOptions{}, Http2ProtocolOptions: h2,
			},
		}
	default: // HTTP/1.1, and TCP ports (Envoy ignores HTTP options there)
		opts.UpstreamProtocolOptions = explicitHTTP1()
	}
	return opts
}

// applyOutlierDetection is Istio's: success-rate ejection off, consecutive
// 5xx and gateway errors enforced at 100% when set, and the panic
// threshold from minHealthPercent (0, disabled, by default).
func applyOutlierDetection(c *clusterv3.Cluster, od *networkingv1.OutlierDetection) {
	if od == nil {
		return
	}
	out := &clusterv3.OutlierDetection{EnforcingSuccessRate: wrapperspb.UInt32(0)}
	enforcing := func(v uint32) *wrapperspb.UInt32Value {
		if v > 0 {
			v = 100
		}
		return wrapperspb.UInt32(v)
	}
	if e := od.GetConsecutive_5XxErrors(); e != nil {
		out.Consecutive_5Xx = wrapperspb.UInt32(e.GetValue())
		out.EnforcingConsecutive_5Xx = enforcing(e.GetValue())
	}
	if e := od.GetConsecutiveGatewayErrors(); e != nil {
		out.ConsecutiveGatewayFailure = wrapperspb.UInt32(e.GetValue())
		out.EnforcingConsecutiveGatewayFailure = enforcing(e.GetValue())
	}
	out.Interval = od.GetInterval()
	out.BaseEjectionTime = od.GetBaseEjectionTime()
	if p := od.GetMaxEjectionPercent(); p > 0 {
		out.MaxEjectionPercent = wrapperspb.UInt32(uint32(min(p, 100)))
	}
	if od.GetSplitExternalLocalOriginErrors() {
		out.SplitExternalLocalOriginErrors = true
		if n := od.GetConsecutiveLocalOriginFailures().GetValue(); n > 0 {
			out.ConsecutiveLocalOriginFailure = wrapperspb.UInt32(n)
			out.EnforcingConsecutiveLocalOriginFailure = wrapperspb.UInt32(100)
		}
		out.EnforcingLocalOriginSuccessRate = wrapperspb.UInt32(0)
	}
	c.OutlierDetection = out
	if p := od.GetMinHealthPercent(); p >= 0 {
		if c.CommonLbConfig == nil {
			c.CommonLbConfig = &clusterv3.Cluster_CommonLbConfig{}
		}
		c.CommonLbConfig.HealthyPanicThreshold = &typev3.Percent{Value: float64(min(p, 100))}
	}
}

// transportSocket is the client TLS of SIMPLE and MUTUAL modes, with the
// certificates as files on the proxy (credentialName, which needs SDS, is
// not configured yet: the model reports it). nil for DISABLE and
// ISTIO_MUTUAL (mtls.go).
func transportSocket(t *networkingv1.ClientTLSSettings) *corev3.TransportSocket {
	mode := t.GetMode()
	if mode != networkingv1.ClientTLSSettings_SIMPLE && mode != networkingv1.ClientTLSSettings_MUTUAL {
		return nil
	}
	if t.GetCredentialName() != "" {
		return nil
	}
	common := &tlsv3.CommonTlsContext{}
	if ca := t.GetCaCertificates(); ca != "" && !t.GetInsecureSkipVerify().GetValue() {
		vc := &tlsv3.CertificateValidationContext{TrustedCa: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: ca}}}
		for _, san := range t.GetSubjectAltNames() {
			vc.MatchTypedSubjectAltNames = append(vc.MatchTypedSubjectAltNames, &tlsv3.SubjectAltNameMatcher{
				SanType: tlsv3.SubjectAltNameMatcher_DNS,
				Matcher: &matcherv3.StringMatcher{MatchPattern: &matcherv3.StringMatcher_Exact{Exact: san}},
			})
		}
		if crl := t.GetCaCrl(); crl != "" {
			vc.Crl = &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: crl}}
		}
		common.ValidationContextType = &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc}
	}
	if mode == networkingv1.ClientTLSSettings_MUTUAL {
		common.TlsCertificates = []*tlsv3.TlsCertificate{{
			CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: t.GetClientCertificate()}},
			PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: t.GetPrivateKey()}},
		}}
	}
	ctx := &tlsv3.UpstreamTlsContext{CommonTlsContext: common, Sni: t.GetSni()}
	return &corev3.TransportSocket{Name: transportSocketTLS, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)}}
}

// grpcTrafficPolicy applies what gRPC supports of a policy, as Istio's
// grpcgen: ring hash for a consistent hash, LEAST_REQUEST, and
// http2MaxRequests as the one circuit breaker (gRFC A32). ROUND_ROBIN is
// gRPC's default; RANDOM and the rest are not applied.
func grpcTrafficPolicy(c *clusterv3.Cluster, tp *networkingv1.TrafficPolicy) {
	lb := tp.GetLoadBalancer()
	switch {
	case lb.GetConsistentHash() != nil:
		applyConsistentHash(c, lb)
		if rh, ok := c.LbConfig.(*clusterv3.Cluster_RingHashLbConfig_); ok {
			// gRPC caps the ring at 8M entries (gRFC A42) and rejects more.
			if n := rh.RingHashLbConfig.GetMinimumRingSize().GetValue(); n > 8<<20 {
				rh.RingHashLbConfig.MinimumRingSize = wrapperspb.UInt64(8 << 20)
			}
		}
		if c.LbPolicy == clusterv3.Cluster_MAGLEV { // not in gRPC
			c.LbPolicy, c.LbConfig = clusterv3.Cluster_ROUND_ROBIN, nil
		}
	case lb.GetSimple() == networkingv1.LoadBalancerSettings_LEAST_REQUEST || lb.GetSimple() == networkingv1.LoadBalancerSettings_LEAST_CONN:
		c.LbPolicy = clusterv3.Cluster_LEAST_REQUEST
	}
	if n := tp.GetConnectionPool().GetHttp().GetHttp2MaxRequests(); n > 0 {
		c.CircuitBreakers = &clusterv3.CircuitBreakers{Thresholds: []*clusterv3.CircuitBreakers_Thresholds{{MaxRequests: wrapperspb.UInt32(uint32(n))}}}
	}
}
