package model

import (
	"encoding/json"
	"fmt"
	"maps"
)

// pod is what the mesh reads of a Pod: its labels (subsets select the
// endpoints of its EndpointSlice entries by them) and its IP (a
// ServiceEntry's workloadSelector makes it an endpoint).
type pod struct {
	labels map[string]string
	ip     string
}

func decodePod(raw []byte) (*pod, error) {
	var v struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
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
	return &pod{labels: v.Metadata.Labels, ip: canonicalIP(v.Status.PodIP)}, nil
}

// samePod reports whether two versions of a pod read the same to the mesh.
func samePod(a, b *pod) bool {
	return a != nil && b != nil && a.ip == b.ip && maps.Equal(a.labels, b.labels)
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
