package model

// SliceRefs is what an EndpointSlice's JSON says of its labels, its ports
// and the objects its endpoints name: what the debouncer keys changes by.
// The JSON tags are the EndpointSlice's; encoding/json fills the same
// struct (FuzzSliceRefs).
type SliceRefs struct {
	Metadata struct {
		Labels map[string]string `json:"labels"`
	} `json:"metadata"`
	Ports     []SlicePortRef     `json:"ports"`
	Endpoints []SliceEndpointRef `json:"endpoints"`
}

// SlicePortRef is one port of an EndpointSlice; nil is a field the JSON
// leaves out.
type SlicePortRef struct {
	Name     *string `json:"name"`
	Port     *int32  `json:"port"`
	Protocol *string `json:"protocol"`
}

// SliceEndpointRef is one endpoint of an EndpointSlice: the object it
// names and its node.
type SliceEndpointRef struct {
	TargetRef *SliceTargetRef `json:"targetRef"`
	NodeName  string          `json:"nodeName"`
}

// SliceTargetRef is an endpoint's targetRef.
type SliceTargetRef struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// The fields DecodeSliceRefs reads, per JSON object, by index.
var (
	refsTopFields      = []string{"metadata", "ports", "endpoints"}
	refsPortFields     = []string{"name", "port", "protocol"}
	refsEndpointFields = []string{"targetRef", "nodeName"}
)

// DecodeSliceRefs fills r from an EndpointSlice's JSON as encoding/json
// would (an empty list and none alike), on a fast path that reads only
// those fields. ok is false when the fast path does not take raw (see
// ObjectLabels; also a number that is not an int32 without fraction or
// exponent, a null anywhere it reads): decode raw into r with encoding/json
// then, which decides.
func DecodeSliceRefs(raw []byte) (r SliceRefs, ok bool) {
	s := jscan{b: raw}
	ok = s.fields(refsTopFields, func(i int) bool {
		switch i {
		case 0:
			return s.fields(objectMetaFields, func(int) bool {
				var ok bool
				r.Metadata.Labels, ok = s.stringMap()
				return ok
			})
		case 1:
			r.Ports = r.Ports[:0]
			return s.array(func() bool {
				var p SlicePortRef
				ok := s.fields(refsPortFields, func(i int) bool {
					switch i {
					case 0:
						v, ok := s.str()
						p.Name = &v
						return ok
					case 1:
						v, ok := s.int32()
						p.Port = &v
						return ok
					default:
						v, ok := s.str()
						p.Protocol = &v
						return ok
					}
				})
				r.Ports = append(r.Ports, p)
				return ok
			})
		default:
			r.Endpoints = r.Endpoints[:0]
			return s.array(func() bool {
				var e SliceEndpointRef
				ok := s.fields(refsEndpointFields, func(i int) bool {
					if i == 1 {
						var ok bool
						e.NodeName, ok = s.str()
						return ok
					}
					ref := &SliceTargetRef{}
					e.TargetRef = ref
					return s.fields(targetRefFields, func(i int) bool {
						var ok bool
						switch i {
						case 0:
							ref.Kind, ok = s.str()
						case 1:
							ref.Namespace, ok = s.str()
						default:
							ref.Name, ok = s.str()
						}
						return ok
					})
				})
				r.Endpoints = append(r.Endpoints, e)
				return ok
			})
		}
	}) && s.end()
	if !ok {
		return SliceRefs{}, false
	}
	return r, true
}
