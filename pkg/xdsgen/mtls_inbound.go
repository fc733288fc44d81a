package xdsgen

import (
	"maps"
	"slices"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// The server side of Istio mTLS: the inbound filter chains of one port by
// its PeerAuthentication mode and protocol, as Istio's
// networking/core/filterchain_options.go lists them, and the listener
// filters they need (the TLS inspector where a chain matches transport
// protocol tls, the HTTP inspector where one matches plaintext HTTP).
//
// mTLS chains terminate Istio mTLS with the workload certificate (SDS
// "default"), require a client certificate the mesh root (SDS "ROOTCA")
// signed, and offer ALPN h2 and http/1.1 (Istio's without metadata
// exchange, mtls.go).

// Istio's ALPNs of mesh traffic: what an Istio client offers over mTLS.
var (
	// mtlsHTTPALPNs are offered by a client that found HTTP (Istio's
	// istio-http/* from its istio.alpn filter).
	mtlsHTTPALPNs = []string{"istio-http/1.0", "istio-http/1.1", "istio-h2"}
	// allIstioMTLSALPNs are every ALPN of Istio mTLS.
	allIstioMTLSALPNs = []string{"istio", "istio-peer-exchange", "istio-http/1.0", "istio-http/1.1", "istio-h2"}
	// mtlsTCPALPNs are offered by a client that did not find HTTP.
	mtlsTCPALPNs = []string{"istio-peer-exchange", "istio"}
)

const tlsTransport = "tls"

// chainOption is one filter chain of a port: its match and whether it is
// HTTP and terminates mTLS.
type chainOption struct {
	alpn      []string
	transport string
	http      bool
	mtls      bool
}

// chainOptions are Istio's filter chain options by protocol and mode.
func chainOptions(proto protocol, mode model.MTLSMode) []chainOption {
	switch proto {
	case protoHTTP, protoHTTP2:
		switch mode {
		case model.MTLSStrict:
			return []chainOption{{transport: tlsTransport, http: true, mtls: true}}
		case model.MTLSPermissive:
			return []chainOption{
				{alpn: allIstioMTLSALPNs, transport: tlsTransport, http: true, mtls: true},
				{transport: rawBuffer, http: true},
			}
		}
		return []chainOption{{transport: rawBuffer, http: true}}
	case protoTCP:
		switch mode {
		case model.MTLSStrict:
			return []chainOption{{transport: tlsTransport, mtls: true}}
		case model.MTLSPermissive:
			return []chainOption{
				{alpn: allIstioMTLSALPNs, transport: tlsTransport, mtls: true},
				{transport: tlsTransport}, // the application's own TLS
				{transport: rawBuffer},
			}
		}
		return []chainOption{{transport: rawBuffer}}
	}
	// Sniffed.
	switch mode {
	case model.MTLSStrict:
		return []chainOption{
			{alpn: mtlsHTTPALPNs, transport: tlsTransport, http: true, mtls: true},
			{transport: tlsTransport, mtls: true},
		}
	case model.MTLSPermissive:
		return []chainOption{
			{alpn: mtlsHTTPALPNs, transport: tlsTransport, http: true, mtls: true},
			{alpn: plaintextHTTPALPNs, transport: rawBuffer, http: true},
			{alpn: mtlsTCPALPNs, transport: tlsTransport, mtls: true},
			{transport: rawBuffer},
			{transport: tlsTransport}, // the application's own TLS
		}
	}
	return []chainOption{
		{alpn: plaintextHTTPALPNs, transport: rawBuffer, http: true},
		{transport: rawBuffer},
	}
}

// inboundChainConfig names a port's chains and builds their filters: the
// HTTP connection manager, and the network filters ending in tcp_proxy.
type inboundChainConfig struct {
	httpName, tcpName string
	http              func() *listenerv3.Filter
	tcp               func() []*listenerv3.Filter
}

// chains are the filter chains of destination port port (0: any) with
// protocol proto under mode.
func (cc inboundChainConfig) chains(port uint32, proto protocol, mode model.MTLSMode) []*listenerv3.FilterChain {
	opts := chainOptions(proto, mode)
	out := make([]*listenerv3.FilterChain, 0, len(opts))
	var httpFilter *listenerv3.Filter // built once, shared by the chains
	var tcpFilters []*listenerv3.Filter
	for _, o := range opts {
		match := &listenerv3.FilterChainMatch{ApplicationProtocols: o.alpn, TransportProtocol: o.transport}
		if port != 0 {
			match.DestinationPort = wrapperspb.UInt32(port)
		}
		fc := &listenerv3.FilterChain{FilterChainMatch: match}
		if o.http {
			if httpFilter == nil {
				httpFilter = cc.http()
			}
			fc.Name, fc.Filters = cc.httpName, []*listenerv3.Filter{httpFilter}
			if o.mtls {
				fc.TransportSocket = inboundMTLSSocketShared()
			}
		} else {
			if tcpFilters == nil {
				tcpFilters = cc.tcp()
			}
			fc.Name, fc.Filters = cc.tcpName, tcpFilters
			if o.mtls {
				fc.TransportSocket = inboundMTLSSocketShared()
			}
		}
		out = append(out, fc)
	}
	return out
}

// supportedCiphers are Istio's cipher suites for mesh mTLS servers.
var supportedCiphers = []string{
	"ECDHE-ECDSA-AES256-GCM-SHA384",
	"ECDHE-RSA-AES256-GCM-SHA384",
	"ECDHE-ECDSA-AES128-GCM-SHA256",
	"ECDHE-RSA-AES128-GCM-SHA256",
	"AES256-GCM-SHA384",
	"AES128-GCM-SHA256",
}

// inboundMTLSSocket is the server side of Istio mTLS (Istio's
// BuildInboundTLS): the workload certificate, a client certificate the
// mesh root signed required, TLS 1.2 to 1.3 with Istio's ciphers, ALPN h2
// and http/1.1 (the "istio" ALPNs match chains; offering them would get in
// the way of the application protocol's).
func inboundMTLSSocket() *corev3.TransportSocket {
	params := tlsParams()
	params.CipherSuites = supportedCiphers
	ctx := &tlsv3.DownstreamTlsContext{
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsParams:                      params,
			AlpnProtocols:                  []string{"h2", "http/1.1"},
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{defaultSecret()},
			ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{
				CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
					DefaultValidationContext:         &tlsv3.CertificateValidationContext{},
					ValidationContextSdsSecretConfig: rootSecret(),
				},
			},
		},
		RequireClientCertificate: wrapperspb.Bool(true),
	}
	return &corev3.TransportSocket{Name: transportSocketTLS, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)}}
}

// inboundMTLSSocketShared is the socket of the HTTP and the TCP chains
// alike (no metadata exchange ALPN on TCP), built and marshalled once.
// Shared, read-only.
var inboundMTLSSocketShared = sync.OnceValue(inboundMTLSSocket)

// inspectorNeeds is what the chains of one destination port need.
type inspectorNeeds struct{ tls, http bool }

// inboundListenerFilters are original_dst and the inspectors the chains
// need (Istio's populateListenerFilters): the TLS inspector where a chain
// matches transport protocol tls, turned off on the ports none of whose
// chains does (or, when the catch-all chains need none, on only the ports
// that need it); then the HTTP inspector, turned off on the ports none of
// whose chains matches plaintext HTTP's ALPNs.
func inboundListenerFilters(chains []*listenerv3.FilterChain) []*listenerv3.ListenerFilter {
	needs := map[uint32]inspectorNeeds{}
	for _, fc := range chains {
		m := fc.GetFilterChainMatch()
		port := m.GetDestinationPort().GetValue()
		n := needs[port]
		n.tls = n.tls || m.GetTransportProtocol() == tlsTransport
		for _, ap := range m.GetApplicationProtocols() {
			if ap == "http/1.1" || ap == "h2c" {
				n.http = true
			}
		}
		needs[port] = n
	}
	ports := slices.Sorted(maps.Keys(needs))
	out := []*listenerv3.ListenerFilter{originalDstFilter()}
	var tlsOn, tlsOff, httpOff []int32
	anyTLS, anyHTTP := false, false
	for _, p := range ports {
		n := needs[p]
		anyTLS, anyHTTP = anyTLS || n.tls, anyHTTP || n.http
		if !n.http {
			httpOff = append(httpOff, int32(p))
		}
		switch {
		case p == 0:
		case n.tls:
			tlsOn = append(tlsOn, int32(p))
		default:
			tlsOff = append(tlsOff, int32(p))
		}
	}
	if anyTLS {
		lf := tlsInspectorFilter()
		switch {
		case needs[0].tls && len(tlsOff) > 0:
			lf = withFilterDisabled(lf, portsPredicate(tlsOff))
		case !needs[0].tls:
			lf = withFilterDisabled(lf, &listenerv3.ListenerFilterChainMatchPredicate{
				Rule: &listenerv3.ListenerFilterChainMatchPredicate_NotMatch{NotMatch: portsPredicate(tlsOn)},
			})
		}
		out = append(out, lf)
	}
	if anyHTTP {
		lf := httpInspectorFilter()
		if len(httpOff) > 0 {
			lf = withFilterDisabled(lf, portsPredicate(httpOff))
		}
		out = append(out, lf)
	}
	return out
}

func withFilterDisabled(lf *listenerv3.ListenerFilter, p *listenerv3.ListenerFilterChainMatchPredicate) *listenerv3.ListenerFilter {
	return &listenerv3.ListenerFilter{Name: lf.Name, ConfigType: lf.ConfigType, FilterDisabled: p}
}

// sortedPorts are the ports of a port-level PeerAuthentication, sorted.
func sortedPorts(m map[uint32]model.MTLSMode) []uint32 {
	return slices.Sorted(maps.Keys(m))
}
