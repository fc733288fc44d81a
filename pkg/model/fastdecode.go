package model

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Services and EndpointSlices are most of the change stream, and replay
// decodes every one. encoding/json spends most of that time in reflection
// and in validating the whole document before decoding it, so these two
// kinds have a fast path: a single pass over the bytes that reads the
// fields the mesh reads and skips the rest (validating it). The fast path
// takes only plain input: ASCII strings without escapes where a value is
// kept, integers without fraction or exponent, no null where a value is
// read, no key that matches a field only without regard to case, no
// repeated field. For anything else it gives up and encoding/json
// decodes the object, so every object decodes to exactly what
// encoding/json makes of it, errors included (FuzzFastDecode checks
// this).

// serviceFields is what the mesh reads of a Service.
type serviceFields struct {
	Metadata struct {
		Annotations map[string]string `json:"annotations"`
	} `json:"metadata"`
	Spec struct {
		Type         corev1.ServiceType   `json:"type"`
		ExternalName string               `json:"externalName"`
		ClusterIP    string               `json:"clusterIP"`
		Ports        []corev1.ServicePort `json:"ports"`
	} `json:"spec"`
}

func (v *serviceFields) entry() *entry {
	svc := &slimService{typ: v.Spec.Type, externalName: v.Spec.ExternalName, clusterIP: v.Spec.ClusterIP, ports: v.Spec.Ports}
	svc.exportTo, svc.hasExportTo = v.Metadata.Annotations[exportToAnnotation]
	return &entry{svc: svc}
}

// sliceFields is what the mesh reads of an EndpointSlice.
type sliceFields struct {
	Metadata struct {
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	AddressType discoveryv1.AddressType    `json:"addressType"`
	Ports       []discoveryv1.EndpointPort `json:"ports"`
	Endpoints   []sliceEndpoint            `json:"endpoints"`
}

func (v *sliceFields) entry() *entry {
	sl := &discoveryv1.EndpointSlice{AddressType: v.AddressType, Ports: v.Ports, Endpoints: make([]discoveryv1.Endpoint, len(v.Endpoints))}
	sl.Labels = v.Metadata.Labels
	for i, e := range v.Endpoints {
		sl.Endpoints[i] = discoveryv1.Endpoint{Addresses: e.Addresses, Conditions: discoveryv1.EndpointConditions{Ready: e.Conditions.Ready}, NodeName: e.NodeName, Zone: e.Zone}
		if r := e.TargetRef; r != nil && r.Kind == KindPod && r.Name != "" {
			sl.Endpoints[i].TargetRef = &corev1.ObjectReference{Kind: KindPod, Namespace: r.Namespace, Name: r.Name}
		}
	}
	return &entry{slice: slimFrom(sl)}
}

// decodeService decodes the fields the mesh reads of a Service: skipping
// the rest (metadata, status) is what makes replay fast. The whole object
// stays in the change stream.
func decodeService(raw []byte) (*entry, error) {
	if e, ok := fastService(raw); ok {
		return e, nil
	}
	return stdService(raw)
}

func stdService(raw []byte) (*entry, error) {
	var v serviceFields
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("decode Service: %w", err)
	}
	return v.entry(), nil
}

// decodeEndpointSlice decodes the fields the mesh reads of an EndpointSlice.
func decodeEndpointSlice(raw []byte) (*entry, error) {
	if e, ok := fastEndpointSlice(raw); ok {
		return e, nil
	}
	return stdEndpointSlice(raw)
}

func stdEndpointSlice(raw []byte) (*entry, error) {
	var v sliceFields
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("decode EndpointSlice: %w", err)
	}
	return v.entry(), nil
}

// The fields the fast path reads, per JSON object, by index.
var (
	serviceTopFields  = []string{"metadata", "spec"}
	serviceMetaFields = []string{"annotations"}
	serviceSpecFields = []string{"type", "externalName", "clusterIP", "ports"}
	servicePortFields = []string{"name", "protocol", "appProtocol", "port", "targetPort", "nodePort"}
	sliceTopFields    = []string{"metadata", "addressType", "ports", "endpoints"}
	sliceMetaFields   = []string{"labels"}
	slicePortFields   = []string{"name", "protocol", "port", "appProtocol"}
	endpointFields    = []string{"addresses", "conditions", "nodeName", "zone", "targetRef"}
	conditionsFields  = []string{"ready"}
	targetRefFields   = []string{"kind", "namespace", "name"}
)

func fastService(raw []byte) (*entry, bool) {
	s := jscan{b: raw}
	var v serviceFields
	ok := s.fields(serviceTopFields, func(i int) bool {
		switch i {
		case 0:
			return s.fields(serviceMetaFields, func(int) bool {
				// {} leaves the annotations nil where encoding/json makes
				// an empty map; the mesh reads only exportTo, so nil reads
				// the same.
				return s.members(func(k []byte) bool {
					if string(k) == exportToAnnotation {
						val, ok := s.str()
						if !ok {
							return false
						}
						v.Metadata.Annotations = map[string]string{exportToAnnotation: val}
						return true
					}
					return s.peek() == '"' && s.skipString() // not a string: encoding/json says why
				})
			})
		default:
			sp := &v.Spec
			return s.fields(serviceSpecFields, func(i int) bool {
				var ok bool
				switch i {
				case 0:
					var t string
					t, ok = s.str()
					sp.Type = corev1.ServiceType(t)
				case 1:
					sp.ExternalName, ok = s.str()
				case 2:
					sp.ClusterIP, ok = s.str()
				default:
					sp.Ports = []corev1.ServicePort{}
					ok = s.array(func() bool {
						var p corev1.ServicePort
						if !s.fields(servicePortFields, func(i int) bool { return s.servicePort(&p, i) }) {
							return false
						}
						sp.Ports = append(sp.Ports, p)
						return true
					})
				}
				return ok
			})
		}
	})
	if !ok || !s.end() {
		return nil, false
	}
	return v.entry(), true
}

func (s *jscan) servicePort(p *corev1.ServicePort, i int) bool {
	var ok bool
	switch i {
	case 0:
		p.Name, ok = s.str()
	case 1:
		var t string
		t, ok = s.str()
		p.Protocol = corev1.Protocol(t)
	case 2:
		var t string
		t, ok = s.str()
		p.AppProtocol = &t
	case 3:
		p.Port, ok = s.int32()
	case 4:
		if s.peek() == '"' {
			p.TargetPort.Type = intstr.String
			p.TargetPort.StrVal, ok = s.str()
		} else {
			p.TargetPort.Type = intstr.Int
			p.TargetPort.IntVal, ok = s.int32()
		}
	default:
		p.NodePort, ok = s.int32()
	}
	return ok
}
