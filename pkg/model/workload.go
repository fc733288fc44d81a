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
}

func decodePod(raw []byte) (*pod, error) {
	var v struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		Spec struct {
			NodeName string `json:"nodeName"`
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
	return &pod{labels: v.Metadata.Labels, ip: canonicalIP(v.Status.PodIP), nodeName: v.Spec.NodeName}, nil
}

// samePod reports whether two versions of a pod read the same to the mesh.
func samePod(a, b *pod) bool {
	return a != nil && b != nil && a.ip == b.ip && a.nodeName == b.nodeName && maps.Equal(a.labels, b.labels)
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
