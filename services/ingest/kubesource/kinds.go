package kubesource

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// API groups of the kinds the source knows.
const (
	GroupGatewayAPI = "gateway.networking.k8s.io"
	groupDiscovery  = "discovery.k8s.io"
)

// The core kinds, always watched with typed informers.
var (
	gvkService       = schema.GroupVersionKind{Version: "v1", Kind: "Service"}
	gvkEndpointSlice = schema.GroupVersionKind{Group: groupDiscovery, Version: "v1", Kind: "EndpointSlice"}
	gvkPod           = schema.GroupVersionKind{Version: "v1", Kind: "Pod"}
	gvkNode          = schema.GroupVersionKind{Version: "v1", Kind: "Node"}
	gvkNamespace     = schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}
)

// CoreKinds are the kinds every cluster is watched for.
var CoreKinds = []schema.GroupVersionKind{gvkService, gvkEndpointSlice, gvkPod, gvkNode, gvkNamespace}

// IstioKinds are Istio's config kinds, watched while their CRDs are
// installed.
var IstioKinds = []schema.GroupKind{
	{Group: "networking.istio.io", Kind: "VirtualService"},
	{Group: "networking.istio.io", Kind: "DestinationRule"},
	{Group: "networking.istio.io", Kind: "Gateway"},
	{Group: "networking.istio.io", Kind: "ServiceEntry"},
	{Group: "networking.istio.io", Kind: "Sidecar"},
	{Group: "networking.istio.io", Kind: "WorkloadEntry"},
	{Group: "networking.istio.io", Kind: "WorkloadGroup"},
	{Group: "networking.istio.io", Kind: "EnvoyFilter"},
	{Group: "networking.istio.io", Kind: "ProxyConfig"},
	{Group: "security.istio.io", Kind: "PeerAuthentication"},
	{Group: "security.istio.io", Kind: "RequestAuthentication"},
	{Group: "security.istio.io", Kind: "AuthorizationPolicy"},
	{Group: "telemetry.istio.io", Kind: "Telemetry"},
	{Group: "extensions.istio.io", Kind: "WasmPlugin"},
}

// GatewayAPIKinds are the Kubernetes Gateway API kinds, watched while their
// CRDs are installed and the Gateway API is enabled.
var GatewayAPIKinds = []schema.GroupKind{
	{Group: GroupGatewayAPI, Kind: "GatewayClass"},
	{Group: GroupGatewayAPI, Kind: "Gateway"},
	{Group: GroupGatewayAPI, Kind: "HTTPRoute"},
	{Group: GroupGatewayAPI, Kind: "GRPCRoute"},
	{Group: GroupGatewayAPI, Kind: "TCPRoute"},
	{Group: GroupGatewayAPI, Kind: "TLSRoute"},
	{Group: GroupGatewayAPI, Kind: "ReferenceGrant"},
	{Group: GroupGatewayAPI, Kind: "BackendTLSPolicy"},
}

// crdKinds returns the CRD-backed kinds to watch when installed.
func crdKinds(gatewayAPI bool) map[schema.GroupKind]struct{} {
	out := make(map[schema.GroupKind]struct{}, len(IstioKinds)+len(GatewayAPIKinds))
	for _, gk := range IstioKinds {
		out[gk] = struct{}{}
	}
	if gatewayAPI {
		for _, gk := range GatewayAPIKinds {
			out[gk] = struct{}{}
		}
	}
	return out
}

// kindLabel is the bounded metric label of a kind: Kind or Kind.group, as
// the change subjects spell it.
func kindLabel(gk schema.GroupKind) string {
	if gk.Group == "" {
		return gk.Kind
	}
	return gk.Kind + "." + gk.Group
}
