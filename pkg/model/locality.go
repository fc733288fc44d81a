package model

import (
	"encoding/json"
	"fmt"
	"strings"
)

// KindNode is the kind of core/v1 Nodes: their topology labels give the
// locality of the workloads on them.
const KindNode = "Node"

// Labels that carry locality, as Istio reads them.
const (
	// LabelLocality is Istio's workload locality label
	// (topology.istio.io/locality), "region.zone.subzone" since label
	// values cannot hold "/"; LabelLocalityLegacy (istio-locality) is the
	// older name, read when the first is absent.
	LabelLocality       = "topology.istio.io/locality"
	LabelLocalityLegacy = "istio-locality"
	// Node labels: the GA topology labels, then their beta names.
	LabelRegion     = "topology.kubernetes.io/region"
	LabelZone       = "topology.kubernetes.io/zone"
	LabelSubZone    = "topology.istio.io/subzone"
	labelRegionBeta = "failure-domain.beta.kubernetes.io/region"
	labelZoneBeta   = "failure-domain.beta.kubernetes.io/zone"
	// LabelCluster, LabelNetwork and LabelHostname complete the topology
	// labels Istio adds to a workload's own for failoverPriority.
	LabelCluster  = "topology.istio.io/cluster"
	LabelNetwork  = "topology.istio.io/network"
	LabelHostname = "kubernetes.io/hostname"
)

// Locality is where a workload runs: region, zone and sub-zone.
type Locality struct {
	Region, Zone, SubZone string
}

// String is Istio's form region/zone/subzone, "" for no locality.
func (l Locality) String() string {
	if l == (Locality{}) {
		return ""
	}
	return l.Region + "/" + l.Zone + "/" + l.SubZone
}

// ParseLocality reads region/zone/subzone (missing parts are empty).
func ParseLocality(s string) Locality {
	r, z, sz := splitLocality(s)
	return Locality{Region: r, Zone: z, SubZone: sz}
}

// Locality returns the endpoint's locality.
func (e *Endpoint) Locality() Locality {
	return Locality{Region: e.Region, Zone: e.Zone, SubZone: e.SubZone}
}

// labelLocality reads a workload's locality label (Istio's
// GetLocalityLabel and SanitizeLocalityLabel: "." separates the parts
// unless the value holds "/"). ok is false without one.
func labelLocality(labels map[string]string) (Locality, bool) {
	v, ok := labels[LabelLocality]
	if !ok {
		v, ok = labels[LabelLocalityLegacy]
	}
	if !ok || v == "" {
		return Locality{}, false
	}
	if !strings.Contains(v, "/") {
		v = strings.ReplaceAll(v, ".", "/")
	}
	return ParseLocality(v), true
}

func (k ObjectKey) isNode() bool { return k.Group == GroupCore && k.Kind == KindNode }

// nodeKey names one Node (cluster-scoped).
type nodeKey struct {
	Cluster, Name string
}

// node is what the mesh reads of a Node: its topology labels.
type node struct {
	locality Locality
}

func decodeNode(raw []byte) (*node, error) {
	l, ok := ObjectLabels(raw)
	if !ok {
		var v struct {
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("decode Node: %w", err)
		}
		l = v.Metadata.Labels
	}
	first := func(a, b string) string {
		if x := l[a]; x != "" {
			return x
		}
		return l[b]
	}
	return &node{locality: Locality{Region: first(LabelRegion, labelRegionBeta), Zone: first(LabelZone, labelZoneBeta), SubZone: l[LabelSubZone]}}, nil
}

// workloadLocality is a Kubernetes workload's locality, as Istio finds a
// pod's: its locality label, else the topology labels of its node (the
// pod's spec.nodeName, else the slice endpoint's nodeName). Without
// either, the slice endpoint's zone (sliceZone) is all that is known.
func workloadLocality(pd *pod, cluster, nodeName, sliceZone string, nodes map[nodeKey]*node) Locality {
	if pd != nil {
		if l, ok := labelLocality(pd.labels); ok {
			return l
		}
		if pd.nodeName != "" {
			nodeName = pd.nodeName
		}
	}
	if n := nodes[nodeKey{Cluster: cluster, Name: nodeName}]; n != nil && nodeName != "" && n.locality != (Locality{}) {
		return n.locality
	}
	return Locality{Zone: sliceZone}
}

// nodeChanged marks what reads the node's labels: the services with
// endpoints on it (by the slices' nodeName or their pods' spec.nodeName),
// and ServiceEntries selecting pods.
func (s *Store) nodeChanged(nk nodeKey) {
	s.indexUsers()
	for sk := range s.nodeUsers[nk] {
		s.dirty[sk] = struct{}{}
	}
	for pk, pd := range s.pods {
		if pd.nodeName == nk.Name && pk.Cluster == nk.Cluster {
			s.podUsers.each(pk, func(sk serviceKey) { s.dirty[sk] = struct{}{} })
		}
	}
	if s.entriesDirty {
		return
	}
	for _, se := range s.entries {
		if se.spec.GetWorkloadSelector() != nil {
			s.entriesDirty = true
			return
		}
	}
}
