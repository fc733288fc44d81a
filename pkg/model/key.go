package model

import "fmt"

// Kinds the model decodes. Every other kind is kept raw.
const (
	// GroupCore is the API group of Services.
	GroupCore = ""
	// KindService is the kind of core/v1 Services.
	KindService = "Service"
	// GroupDiscovery is the API group of EndpointSlices.
	GroupDiscovery = "discovery.k8s.io"
	// KindEndpointSlice is the kind of discovery.k8s.io/v1 EndpointSlices.
	KindEndpointSlice = "EndpointSlice"
	// KindPod is the kind of core/v1 Pods: their labels select subsets.
	KindPod = "Pod"
	// GroupNetworking is the API group of Istio's networking config.
	GroupNetworking = "networking.istio.io"
	// KindDestinationRule, KindServiceEntry and KindWorkloadEntry are
	// Istio's networking kinds the model reads (any of v1, v1beta1 and
	// v1alpha3: one schema).
	KindDestinationRule = "DestinationRule"
	KindServiceEntry    = "ServiceEntry"
	KindWorkloadEntry   = "WorkloadEntry"
	KindSidecar         = "Sidecar"
)

// ObjectKey identifies one object in one cluster. The API version is not part
// of the key: two versions of a kind name the same object.
type ObjectKey struct {
	Cluster   string
	Group     string
	Kind      string
	Namespace string
	Name      string
}

func (k ObjectKey) String() string {
	return fmt.Sprintf("%s/%s.%s/%s/%s", k.Cluster, k.Kind, k.Group, k.Namespace, k.Name)
}

func (k ObjectKey) isService() bool { return k.Group == GroupCore && k.Kind == KindService }

func (k ObjectKey) isEndpointSlice() bool {
	return k.Group == GroupDiscovery && k.Kind == KindEndpointSlice
}

func (k ObjectKey) isPod() bool { return k.Group == GroupCore && k.Kind == KindPod }

func (k ObjectKey) isNetworking(kind string) bool {
	return k.Group == GroupNetworking && k.Kind == kind
}

// podKey names one Pod.
type podKey struct {
	Cluster, Namespace, Name string
}

// serviceKey names a mesh service: namespace sameness makes the cluster
// irrelevant.
type serviceKey struct {
	Namespace string
	Name      string
}

// sliceID names one EndpointSlice within a namespace.
type sliceID struct {
	Cluster string
	Name    string
}
