package manifest

// The kinds ingest records in the change stream: an allowlist, so that
// nothing it was not meant to keep (Secrets above all, whose records would
// stay in the history for as long as it is retained, a delete carrying
// their last content) is ever written. It is what the mesh model decodes
// (pkg/model), what `pilotwire history` and `render` are for, and what the
// Kubernetes source watches (kubesource.CoreKinds, IstioKinds,
// GatewayAPIKinds; a test keeps the two lists in step):
//
//   - core: Service, Pod, Node, Namespace; discovery.k8s.io EndpointSlice;
//   - Istio's config kinds (networking, security, telemetry, extensions);
//   - the Kubernetes Gateway API kinds.
//
// Anything else (Secret, ConfigMap, Deployment, custom resources) is
// not recorded. A kind added here is recorded from the next start on; a
// kind removed is purged from the stream at the next start.
var recorded = map[groupKind]bool{
	{"", "Service"}:                       true,
	{"", "Pod"}:                           true,
	{"", "Node"}:                          true,
	{"", "Namespace"}:                     true,
	{"discovery.k8s.io", "EndpointSlice"}: true,

	{"networking.istio.io", "VirtualService"}:      true,
	{"networking.istio.io", "DestinationRule"}:     true,
	{"networking.istio.io", "Gateway"}:             true,
	{"networking.istio.io", "ServiceEntry"}:        true,
	{"networking.istio.io", "Sidecar"}:             true,
	{"networking.istio.io", "WorkloadEntry"}:       true,
	{"networking.istio.io", "WorkloadGroup"}:       true,
	{"networking.istio.io", "EnvoyFilter"}:         true,
	{"networking.istio.io", "ProxyConfig"}:         true,
	{"security.istio.io", "PeerAuthentication"}:    true,
	{"security.istio.io", "RequestAuthentication"}: true,
	{"security.istio.io", "AuthorizationPolicy"}:   true,
	{"telemetry.istio.io", "Telemetry"}:            true,
	{"extensions.istio.io", "WasmPlugin"}:          true,

	{"gateway.networking.k8s.io", "GatewayClass"}:     true,
	{"gateway.networking.k8s.io", "Gateway"}:          true,
	{"gateway.networking.k8s.io", "HTTPRoute"}:        true,
	{"gateway.networking.k8s.io", "GRPCRoute"}:        true,
	{"gateway.networking.k8s.io", "TCPRoute"}:         true,
	{"gateway.networking.k8s.io", "TLSRoute"}:         true,
	{"gateway.networking.k8s.io", "ReferenceGrant"}:   true,
	{"gateway.networking.k8s.io", "BackendTLSPolicy"}: true,
}

// Recorded reports whether ingest records objects of a kind (group empty
// for the core group). See the list above.
func Recorded(group, kind string) bool { return recorded[groupKind{group, kind}] }
