package xdsgen

import (
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networkingv1 "istio.io/api/networking/v1"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// Istio mTLS for proxyless gRPC (xDS credentials, gRFC A29), as Istio's
// grpcgen builds it.
//
// Certificates: gRPC reads none over SDS. Its bootstrap names certificate
// provider instances; the TLS contexts pilotwire sends name the instance
// "default" (Istio's bootstrap: plugin file_watcher on the cert-chain.pem,
// key.pem and root-cert.pem istio-agent writes), certificate "default" for
// the workload's and "ROOTCA" for the mesh root. A gRPC application takes
// them only with xDS credentials (credentials/xds); one without falls back
// to its own. grpc-go rejects a cluster or listener naming an instance its
// bootstrap lacks, so pilotwire sends TLS only where the client asked:
//
// Client side (clusters of a proxyless client):
//   - a DestinationRule's tls ISTIO_MUTUAL: mTLS requiring the rule's
//     subjectAltNames, else the service's identities, among the server's
//     SANs (Istio's grpcgen; Istio always takes the service's);
//   - no tls, auto mTLS on, a client whose workload is labelled
//     security.istio.io/tlsMode=istio (what Istio's grpc-agent template
//     asks a user to set on a gRPC workload that uses xDS credentials): mTLS
//     to a service whose namespace (or mesh) PeerAuthentication is STRICT
//     and whose every endpoint on the port carries that label. Istio's
//     grpcgen sends none: it cannot know whether the client uses xDS
//     credentials (the label says so), and gRPC cannot offer Istio's ALPNs,
//     which a PERMISSIVE sidecar wants (a STRICT one takes any); a STRICT
//     endpoint without the label serves no mTLS. A gRPC cluster has one
//     transport socket for all its endpoints (grpc-go rejects
//     transport_socket_matches).
//   - DISABLE: plaintext; SIMPLE and MUTUAL name files, which gRPC cannot
//     read from xDS: plaintext, as Istio.
//
// Server side (the listener a gRPC server asks for on each port), by the
// workload's PeerAuthentication on that port, as Istio's grpcgen: STRICT
// requires mTLS (a client certificate the root signed); PERMISSIVE serves
// plaintext (gRPC cannot tell TLS from plaintext on one port: its filter
// chains match no transport protocol), except on a workload labelled
// tlsMode istio, which clients reach with mTLS: STRICT; DISABLE serves
// plaintext.
//
// grpc-go refuses tls_params, SAN matchers on the server and SDS secrets,
// and ignores ALPN: none is sent.

// grpcCertProvider is the certificate provider instance of Istio's gRPC
// bootstrap.
const grpcCertProvider = "default"

// grpcCommonTLS is the TLS context of both sides: the workload certificate
// and the root from the bootstrap's provider, and the server's identity
// among sans on a client (none on a server), in the fields of gRFC A29
// (gRPC 1.66 and later). Istio also sets their deprecated forms, in a
// combined validation context without the SDS secret Envoy requires there:
// pilotwire sends a plain validation context, which Envoy's rules accept,
// so gRPC libraries that read only the deprecated fields are not served.
func grpcCommonTLS(sans []string) *tlsv3.CommonTlsContext {
	vc := &tlsv3.CertificateValidationContext{
		CaCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{InstanceName: grpcCertProvider, CertificateName: sdsRoot},
	}
	//lint:ignore SA1019 grpc-go matches SANs with this field
	vc.MatchSubjectAltNames = sanMatchers(sans)
	return &tlsv3.CommonTlsContext{
		TlsCertificateProviderInstance: &tlsv3.CertificateProviderPluginInstance{InstanceName: grpcCertProvider, CertificateName: sdsDefault},
		ValidationContextType:          &tlsv3.CommonTlsContext_ValidationContext{ValidationContext: vc},
	}
}

// grpcClientTLS is the transport socket of a client's mTLS to a server
// with one of sans.
func grpcClientTLS(sans []string) *corev3.TransportSocket {
	ctx := &tlsv3.UpstreamTlsContext{CommonTlsContext: grpcCommonTLS(sans)}
	return &corev3.TransportSocket{Name: transportSocketTLS, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)}}
}

// grpcServerTLS is the transport socket of a server requiring mTLS.
// Shared, read-only.
var grpcServerTLS = sync.OnceValue(func() *corev3.TransportSocket {
	ctx := &tlsv3.DownstreamTlsContext{
		CommonTlsContext:         grpcCommonTLS(nil),
		RequireClientCertificate: wrapperspb.Bool(true),
	}
	return &corev3.TransportSocket{Name: transportSocketTLS, ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: mustAny(ctx)}}
})

// grpcClusterTLS is the transport socket of a proxyless client's cluster
// to port p of svc under traffic policy tp (nil: none), or nil for
// plaintext; autoMTLS says the client uses xDS credentials (see the top of
// this file).
func grpcClusterTLS(m *model.Mesh, svc *model.Service, p *model.Port, tp *networkingv1.TrafficPolicy, autoMTLS bool) *corev3.TransportSocket {
	tls := tp.GetTls()
	switch {
	case tls.GetMode() == networkingv1.ClientTLSSettings_ISTIO_MUTUAL:
		sans := tls.GetSubjectAltNames()
		if sans == nil {
			sans = svc.ServiceAccounts
		}
		return grpcClientTLS(sans)
	case tls != nil, !autoMTLS, !m.AutoMTLS(), svc.MeshExternal:
		return nil
	case svc.MTLSMode() == model.MTLSStrict && svc.AllSidecars(p.Port):
		return grpcClientTLS(svc.ServiceAccounts)
	}
	return nil
}

// grpcServerMode is the mTLS mode a gRPC server of a workload with
// PeerAuthentication pa serves target port with; xdsCreds: the workload
// uses xDS credentials.
func grpcServerMode(pa model.PeerAuthn, xdsCreds bool, target int32) model.MTLSMode {
	mode := pa.ForPort(uint32(target))
	if mode == model.MTLSPermissive {
		if xdsCreds {
			return model.MTLSStrict
		}
		return model.MTLSDisable
	}
	return mode
}

// usesXDSCredentials reports whether a proxyless workload with labels says
// it uses xDS credentials (Istio's tlsMode label).
func usesXDSCredentials(labels map[string]string) bool {
	return labels[model.TLSModeLabel] == model.IstioTLSMode
}
