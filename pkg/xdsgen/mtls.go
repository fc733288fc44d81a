package xdsgen

import (
	"sync"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rawbufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// Istio mTLS between sidecars, as Istio's cluster builder
// (networking/core/cluster_tls.go) and authn policy applier build it.
//
// Certificates: the workload's (SDS secret "default") and the mesh root
// (SDS secret "ROOTCA"), both from istio-agent over the sds-grpc cluster of
// the proxy's bootstrap (Istio's ConstructSdsSecretConfig). pilotwire
// serves no secret itself.
//
// Client side (outbound clusters):
//   - a DestinationRule's tls ISTIO_MUTUAL: Istio's mTLS context, its sni
//     (else outbound_.<port>_.<subset>_.<host>) and subjectAltNames (else
//     the service's identities);
//   - no tls at all, auto mTLS on (enableAutoMtls), a destination inside
//     the mesh whose namespace's PeerAuthentication does not DISABLE mTLS:
//     transport_socket_matches, the mTLS context to endpoints labelled
//     tlsMode istio (metadata envoy.transport_socket_match) and plaintext
//     to the others; on a passthrough port (headless services, resolution
//     NONE), where endpoints are not known to the cluster, the mTLS
//     context itself when every endpoint has a sidecar, else nothing;
//   - DISABLE, SIMPLE and MUTUAL are the rule's own (policy.go).
//
// ALPN: pilotwire configures no metadata exchange, so it advertises what
// Istio does without it ("istio", and "h2" on HTTP/2 clusters): the
// istio-peer-exchange protocol is never negotiated, with pilotwire's
// servers or Istio's.

// Istio's SDS resource names and cluster.
const (
	sdsClusterName = "sds-grpc"
	sdsDefault     = "default"
	sdsRoot        = "ROOTCA"
)

// agentSecret is the SDS config of a secret istio-agent serves on its
// sds-grpc cluster (Istio's ConstructSdsSecretConfig).
func agentSecret(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{
		Name: name,
		SdsConfig: &corev3.ConfigSource{
			ConfigSourceSpecifier: &corev3.ConfigSource_ApiConfigSource{ApiConfigSource: &corev3.ApiConfigSource{
				ApiType:                   corev3.ApiConfigSource_GRPC,
				SetNodeOnFirstMessageOnly: true,
				TransportApiVersion:       corev3.ApiVersion_V3,
				GrpcServices: []*corev3.GrpcService{{TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{
					EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: sdsClusterName},
				}}},
			}},
			ResourceApiVersion:  corev3.ApiVersion_V3,
			InitialFetchTimeout: durationpb.New(0),
		},
	}
}

// The SDS configs of the workload certificate and the root, shared by
// every mTLS context (read-only).
var (
	defaultSecret = sync.OnceValue(func() *tlsv3.SdsSecretConfig { return agentSecret(sdsDefault) })
	rootSecret    = sync.OnceValue(func() *tlsv3.SdsSecretConfig { return agentSecret(sdsRoot) })
	meshTLSParams = sync.OnceValue(tlsParams)
)

// tlsParams are Istio's defaults for mesh mTLS: TLS 1.2 to 1.3.
func tlsParams() *tlsv3.TlsParameters {
	return &tlsv3.TlsParameters{
		TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2,
		TlsMaximumProtocolVersion: tlsv3.TlsParameters_TLSv1_3,
	}
}

// ALPNs a client advertises to a sidecar (Istio's ALPNInMesh,
// ALPNInMeshH2).
var (
	alpnInMesh   = []string{"istio"}
	alpnInMeshH2 = []string{"istio", "h2"}
)

// defaultSNI is Istio's SNI for mTLS to a service port (and subset):
// model.BuildDNSSrvSubsetKey, outbound_.<port>_.<subset>_.<host>.
func defaultSNI(port int32, subset, host string) string {
	return "outbound_." + portString(port) + "_." + subset + "_." + host
}

// sanMatchers match any of sans exactly (nil for none).
func sanMatchers(sans []string) []*matcherv3.StringMatcher {
	var out []*matcherv3.StringMatcher
	for _, san := range sans {
		out = append(out, exactMatcher(san))
	}
	return out
}

// istioMutualSocket is the client's Istio mTLS transport socket: the
// workload certificate, the mesh root, the server's identity among sans
// (none: any the root signed), sni and the in-mesh ALPN.
func istioMutualSocket(sni string, sans []string, h2 bool) *corev3.TransportSocket {
	vc := &tlsv3.CertificateValidationContext{}
	//lint:ignore SA1019 Istio matches the SANs with this field (any SAN type)
	vc.MatchSubjectAltNames = sanMatchers(sans)
	alpn := alpnInMesh
	if h2 {
		alpn = alpnInMeshH2
	}
	ctx := &tlsv3.UpstreamTlsContext{
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsParams:                      meshTLSParams(),
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{defaultSecret()},
			ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{
				CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
					DefaultValidationContext:         vc,
					ValidationContextSdsSecretConfig: rootSecret(),
				},
			},
			AlpnProtocols: alpn,
		},
		Sni: sni,
	}
	return &corev3.TransportSocket{Name: transportSocketTLS, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)}}
}

// plaintextMatch is the tlsMode-disabled match: endpoints without Istio's
// sidecar get plaintext. Shared, read-only.
var plaintextMatch = sync.OnceValue(func() *clusterv3.Cluster_TransportSocketMatch {
	return &clusterv3.Cluster_TransportSocketMatch{
		Name:            "tlsMode-disabled",
		Match:           &structpb.Struct{},
		TransportSocket: rawBufferSocket(),
	}
})

// rawBufferSocket is the plaintext transport socket. Shared, read-only.
var rawBufferSocket = sync.OnceValue(func() *corev3.TransportSocket {
	return &corev3.TransportSocket{Name: "envoy.transport_sockets.raw_buffer", ConfigType: &corev3.TransportSocket_TypedConfig{
		TypedConfig: mustAny(&rawbufferv3.RawBuffer{}),
	}}
})

// istioTLSMatch selects endpoints whose metadata says tlsMode istio.
// Shared, read-only.
var istioTLSMatch = sync.OnceValue(func() *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{"tlsMode": structpb.NewStringValue(model.IstioTLSMode)}}
})

// applyMeshTLS sets the Istio mTLS of an outbound sidecar cluster (of
// service svc, port p, subset "" or a subset, under traffic policy tp, nil
// without one), as Istio's buildUpstreamTLSSettings and
// applyUpstreamTLSSettings: see the comment at the top of this file.
func applyMeshTLS(m *model.Mesh, c *clusterv3.Cluster, svc *model.Service, p *model.Port, subset string, tp *networkingv1.TrafficPolicy, h2 bool) {
	tls := tp.GetTls()
	sni := defaultSNI(p.Port, subset, svc.Hostname)
	switch {
	case tls.GetMode() == networkingv1.ClientTLSSettings_ISTIO_MUTUAL:
		if tls.GetSni() != "" {
			sni = tls.GetSni()
		}
		sans := tls.GetSubjectAltNames()
		if sans == nil {
			sans = svc.ServiceAccounts
		}
		c.TransportSocket = istioMutualSocket(sni, sans, h2)
		return
	case tls != nil: // DISABLE, SIMPLE, MUTUAL: the rule's own
		return
	case !m.AutoMTLS() || svc.MeshExternal || svc.ExternalName != "":
		return
	case serviceMTLSMode(svc, p, tp) == model.MTLSDisable:
		return
	}
	ts := istioMutualSocket(sni, svc.ServiceAccounts, h2)
	if c.GetType() == clusterv3.Cluster_ORIGINAL_DST {
		c.TransportSocket = ts
		return
	}
	c.TransportSocketMatches = []*clusterv3.Cluster_TransportSocketMatch{
		{Name: "tlsMode-istio", Match: istioTLSMatch(), TransportSocket: ts},
		plaintextMatch(),
	}
}

// serviceMTLSMode is what a client assumes of a service port's servers
// (Istio's BestEffortInferServiceMTLSMode): on a passthrough port, DISABLE
// unless every endpoint has a sidecar; else the mode of the mesh and
// namespace PeerAuthentications of its namespace.
func serviceMTLSMode(svc *model.Service, p *model.Port, tp *networkingv1.TrafficPolicy) model.MTLSMode {
	passthrough := svc.Resolution == model.Passthrough || tp.GetLoadBalancer().GetSimple() == networkingv1.LoadBalancerSettings_PASSTHROUGH
	if passthrough && !svc.AllSidecars(p.Port) {
		return model.MTLSDisable
	}
	return svc.MTLSMode()
}
