package model

import (
	"encoding/json"
	"fmt"
	"maps"
)

// pod is what the mesh reads of a Pod: its labels (subsets select the
// endpoints of its EndpointSlice entries by them), its IP (a
// ServiceEntry's workloadSelector makes it an endpoint) and its node
// (whose labels give its locality unless its own labels do).
type pod struct {
	labels   map[string]string
	ip       string
	nodeName string
	// sa is spec.serviceAccountName: its endpoints' identity.
	sa string
}

// decodePod reads a Pod on the fast path (fastPod), else with
// encoding/json (stdPod), which decides what the fast path declines.
func decodePod(raw []byte) (*pod, error) {
	if p, ok := fastPod(raw); ok {
		return p, nil
	}
	return stdPod(raw)
}

// The fields fastPod reads, per JSON object, by index.
var (
	podTopFields       = []string{"metadata", "spec", "status"}
	podSpecFields      = []string{"nodeName", "serviceAccountName"}
	podStatusFields    = []string{"podIP", "conditions"}
	podConditionFields = []string{"type", "status"}
)

// fastPod reads what stdPod reads, on jscan (see ObjectLabels for what it
// declines). The conditions are read only to decline what encoding/json
// refuses there. FuzzFastPod holds it equal to stdPod.
func fastPod(raw []byte) (*pod, bool) {
	s := jscan{b: raw}
	var labels map[string]string
	var ip, nodeName, sa string
	ok := s.fields(podTopFields, func(i int) bool {
		switch i {
		case 0:
			return s.fields(objectMetaFields, func(int) bool {
				var ok bool
				labels, ok = s.stringMap()
				return ok
			})
		case 1:
			return s.fields(podSpecFields, func(i int) bool {
				var ok bool
				if i == 0 {
					nodeName, ok = s.str()
				} else {
					sa, ok = s.str()
				}
				return ok
			})
		default:
			return s.fields(podStatusFields, func(i int) bool {
				if i == 0 {
					var ok bool
					ip, ok = s.str()
					return ok
				}
				return s.array(func() bool {
					return s.fields(podConditionFields, func(int) bool {
						_, ok := s.plain()
						return ok
					})
				})
			})
		}
	}) && s.end()
	if !ok {
		return nil, false
	}
	return &pod{labels: labels, ip: canonicalIP(ip), nodeName: nodeName, sa: sa}, true
}

// stdPod is decodePod with encoding/json.
func stdPod(raw []byte) (*pod, error) {
	var v struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			NodeName           string `json:"nodeName"`
			ServiceAccountName string `json:"serviceAccountName"`
		} `json:"spec"`
		Status struct {
			PodIP      string `json:"podIP"`
			Conditions []struct {
				Type   string `json:"type"`
				Status string `json:"status"`
			} `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("decode Pod: %w", err)
	}
	return &pod{labels: v.Metadata.Labels, ip: canonicalIP(v.Status.PodIP), nodeName: v.Spec.NodeName, sa: v.Spec.ServiceAccountName}, nil
}

// samePod reports whether two versions of a pod read the same to the mesh.
func samePod(a, b *pod) bool {
	return a != nil && b != nil && a.ip == b.ip && a.nodeName == b.nodeName && a.sa == b.sa && maps.Equal(a.labels, b.labels)
}

// selects reports whether every label of selector is in labels.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}
