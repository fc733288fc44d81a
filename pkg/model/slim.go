package model

import (
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// slimService is what the model keeps of a Service: what buildService
// reads of it (a corev1.Service is about 750 bytes before its ports).
type slimService struct {
	typ          corev1.ServiceType
	externalName string
	clusterIP    string
	// exportTo is the networking.istio.io/exportTo annotation, if set.
	exportTo    string
	hasExportTo bool
	ports       []corev1.ServicePort
}

// slimSlice is what the model keeps of an EndpointSlice: only what the
// mesh reads of it (servingSlice, portEndpoints, countPodUsers). A
// frontend holds one per slice of the mesh, so its size is the model's:
// an endpoint takes 88 bytes here, against about 260 as a
// discoveryv1.Endpoint with its pointers and its ObjectReference.
type slimSlice struct {
	serviceName string // the kubernetes.io/service-name label
	addressType discoveryv1.AddressType
	ports       []slimPort
	endpoints   []slimEndpoint
}

// slimPort is one port of a slice.
type slimPort struct {
	name     string
	protocol corev1.Protocol // as given; "" means TCP
	port     int32           // 0: none given (as unusable as 0 itself)
}

// slimEndpoint is one endpoint of a slice.
type slimEndpoint struct {
	// address is the first of its addresses ("": none). An endpoint's
	// addresses are fungible: the mesh only ever uses the first.
	address  string
	nodeName string
	zone     string
	// podNamespace and podName are its target reference when that is a
	// Pod with a name (podName "": none).
	podNamespace, podName string
	// notReady: conditions.ready is false (absent counts as ready).
	notReady bool
}

// slimFrom keeps what the mesh reads of sl.
func slimFrom(sl *discoveryv1.EndpointSlice) *slimSlice {
	s := &slimSlice{serviceName: sl.Labels[discoveryv1.LabelServiceName], addressType: sl.AddressType}
	if len(sl.Ports) > 0 {
		s.ports = make([]slimPort, len(sl.Ports))
		for i, p := range sl.Ports {
			s.ports[i] = slimPort{name: deref(p.Name), protocol: deref(p.Protocol), port: deref(p.Port)}
		}
	}
	if len(sl.Endpoints) > 0 {
		s.endpoints = make([]slimEndpoint, len(sl.Endpoints))
		for i, e := range sl.Endpoints {
			se := &s.endpoints[i]
			if len(e.Addresses) > 0 {
				se.address = e.Addresses[0]
			}
			se.nodeName, se.zone = deref(e.NodeName), deref(e.Zone)
			if r := e.TargetRef; r != nil && r.Kind == KindPod && r.Name != "" {
				se.podNamespace, se.podName = r.Namespace, r.Name
			}
			se.notReady = e.Conditions.Ready != nil && !*e.Conditions.Ready
		}
	}
	return s
}
