package debouncer

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/debounce"
	"github.com/pilotwire/pilotwire/pkg/model"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// Push trigger reasons, Istio's names.
const (
	ReasonEndpoint = "endpoint"
	ReasonService  = "service"
	ReasonConfig   = "config"
	ReasonProxy    = "proxy"
)

// serviceNameLabel joins an EndpointSlice to its Service.
const serviceNameLabel = "kubernetes.io/service-name"

// toEvent turns one change record into a debounce event. An EndpointSlice
// change is endpoint-only (not full) and keyed by its Service, as Istio keys
// EDS updates by service, unless the endpoint index says it needs a full
// push; everything else is a full push keyed by itself.
func toEvent(data []byte, seq uint64, idx *endpointIndex) (debounce.Event, error) {
	rec := &pb.ChangeRecord{}
	if err := proto.Unmarshal(data, rec); err != nil {
		return debounce.Event{}, fmt.Errorf("decode change record seq %d: %w", seq, err)
	}
	ref := rec.GetRef()
	ev := debounce.Event{Seq: seq, Full: true, Reason: ReasonConfig}
	if t := rec.GetObservedAt(); t != nil {
		ev.Start = t.AsTime()
	}
	key := debounce.ConfigKey{Kind: ref.GetKind(), Namespace: ref.GetNamespace(), Name: ref.GetName(), Cluster: rec.GetCluster()}
	switch {
	case ref.GetGroup() == "discovery.k8s.io" && ref.GetKind() == "EndpointSlice":
		ev.Reason = ReasonEndpoint
		sl := parseSlice(rec.GetObject())
		if sl.service != "" {
			key = debounce.ConfigKey{Kind: "Service", Namespace: ref.GetNamespace(), Name: sl.service, Cluster: rec.GetCluster()}
		}
		ev.Full = idx.apply(rec.GetCluster(), ref.GetNamespace(), ref.GetName(), sl, rec.GetOp() == pb.Op_OP_DELETE)
	case ref.GetGroup() == "" && ref.GetKind() == "Service":
		ev.Reason = ReasonService
	case ref.GetGroup() == "" && ref.GetKind() == "Pod":
		// Like Istio's proxy updates: they concern the proxies on that pod,
		// not every proxy, so they are not full pushes; the pusher scopes
		// them. A change of the pod's labels also moves its endpoints
		// between subsets: an endpoint push of the services whose slices
		// name the pod.
		ev.Full = false
		ev.Reason = ReasonProxy
		svcs := idx.podChange(rec.GetCluster(), ref.GetNamespace(), ref.GetName(), podLabels(rec.GetObject()), rec.GetOp() == pb.Op_OP_DELETE)
		if len(svcs) > 0 {
			ev.Reason = ReasonEndpoint
		}
		ev.ConfigKeys = []debounce.ConfigKey{key}
		for _, s := range svcs {
			ev.ConfigKeys = append(ev.ConfigKeys, debounce.ConfigKey{Kind: "Service", Namespace: s.ns, Name: s.name, Cluster: s.cluster})
		}
		return ev, nil
	case ref.GetGroup() == "" && ref.GetKind() == "Node":
		// A proxy update too, but a Node's topology labels are the
		// locality of the endpoints on it: a change of them is an
		// endpoint push of the services with endpoints there.
		ev.Full = false
		ev.Reason = ReasonProxy
		svcs := idx.nodeChange(rec.GetCluster(), ref.GetName(), nodeTopology(rec.GetObject()), rec.GetOp() == pb.Op_OP_DELETE)
		if len(svcs) > 0 {
			ev.Reason = ReasonEndpoint
		}
		ev.ConfigKeys = []debounce.ConfigKey{key}
		for _, s := range svcs {
			ev.ConfigKeys = append(ev.ConfigKeys, debounce.ConfigKey{Kind: "Service", Namespace: s.ns, Name: s.name, Cluster: s.cluster})
		}
		return ev, nil
	case ref.GetGroup() == "" && ref.GetKind() == "Namespace":
		ev.Reason = ReasonProxy
	}
	ev.ConfigKeys = []debounce.ConfigKey{key}
	return ev, nil
}

// slice is what the debouncer reads of an EndpointSlice.
type slice struct {
	service string   // kubernetes.io/service-name
	ports   string   // canonical signature of its ports
	pods    []string // the pods its endpoints' targetRefs name, as namespace/name
	nodes   []string // its endpoints' nodeNames
}

// topologyLabels are the Node labels that give a locality (the model's
// locality.go reads the same).
var topologyLabels = []string{
	"topology.kubernetes.io/region", "topology.kubernetes.io/zone", "topology.istio.io/subzone",
	"failure-domain.beta.kubernetes.io/region", "failure-domain.beta.kubernetes.io/zone",
}

// nodeTopology is a canonical form of a Node's topology labels.
func nodeTopology(obj []byte) string {
	labels, ok := objectLabels(obj)
	if !ok {
		return ""
	}
	var b strings.Builder
	for _, k := range topologyLabels {
		if v, ok := labels[k]; ok {
			b.WriteString(k + "=" + v + ",")
		}
	}
	return b.String()
}

// objectLabels is an object's metadata.labels: on model.ObjectLabels's
// fast path (a pod's labels in about a quarter of encoding/json's time,
// BenchmarkObjectLabels), else as encoding/json decodes them. false: the
// object cannot be read.
func objectLabels(obj []byte) (map[string]string, bool) {
	if labels, ok := model.ObjectLabels(obj); ok {
		return labels, true
	}
	var o struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if len(obj) == 0 || json.Unmarshal(obj, &o) != nil {
		return nil, false
	}
	return o.Metadata.Labels, true
}

// podLabels is a canonical form of a pod's labels.
func podLabels(obj []byte) string {
	labels, ok := objectLabels(obj)
	if !ok {
		return ""
	}
	ls := make([]string, 0, len(labels))
	for k, v := range labels {
		ls = append(ls, k+"="+v)
	}
	slices.Sort(ls)
	return strings.Join(ls, ",")
}

func parseSlice(obj []byte) slice {
	// The model's fast path (about a quarter of encoding/json's time for
	// a slice of 10 endpoints, BenchmarkSliceRefs), else encoding/json.
	o, ok := model.DecodeSliceRefs(obj)
	if !ok && (len(obj) == 0 || json.Unmarshal(obj, &o) != nil) {
		return slice{}
	}
	var ps []string
	for _, p := range o.Ports {
		name, proto, port := "", "TCP", int32(0)
		if p.Name != nil {
			name = *p.Name
		}
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		if p.Port != nil {
			port = *p.Port
		}
		ps = append(ps, fmt.Sprintf("%s/%s/%d", name, proto, port))
	}
	slices.Sort(ps)
	var pods, nodes []string
	for _, e := range o.Endpoints {
		if r := e.TargetRef; r != nil && r.Kind == "Pod" && r.Name != "" {
			pods = append(pods, r.Namespace+"/"+r.Name)
		}
		if e.NodeName != "" {
			nodes = append(nodes, e.NodeName)
		}
	}
	return slice{service: o.Metadata.Labels[serviceNameLabel], ports: strings.Join(ps, ","), pods: pods, nodes: nodes}
}

// endpointIndex remembers which EndpointSlices each service has and their
// ports, to tell, as Istio does, an endpoint change that needs a full push
// (the service's first endpoints, its last endpoints gone, or changed
// ports) from one that only changes load assignments.
//
// It also remembers which services' slices name each pod, and each pod's
// labels, so that a pod label change becomes an endpoint push of those
// services. Each active term rebuilds it from the last EndpointSlice and
// Pod records at the floor it resumes from (podindex.go); a slice the
// rebuild did not read (past its bound) makes its service's first change
// full (conservative, never a missed full push), and a pod whose services
// are not known gets no push: its services' next slice change carries the
// labels. Nodes likewise: a change of a Node's topology labels (the
// locality of its endpoints) is an endpoint push of the services whose
// slices have endpoints on it.
type endpointIndex struct {
	slices    map[sliceID]slice
	services  map[svcID]int           // number of slices
	podUsers  map[podID]map[svcID]int // services whose slices name the pod
	podLabels map[podID]string        // canonical labels, as last seen
	nodeUsers map[podID]map[svcID]int // services with endpoints on the node (ns "")
	nodeTopo  map[podID]string        // canonical topology labels, as last seen
}

// podID names a pod, or a node with ns "".
type podID struct{ cluster, ns, name string }

type sliceID struct{ cluster, ns, name string }
type svcID struct{ cluster, ns, name string }

func newEndpointIndex() *endpointIndex {
	return &endpointIndex{slices: make(map[sliceID]slice), services: make(map[svcID]int),
		podUsers: make(map[podID]map[svcID]int), podLabels: make(map[podID]string),
		nodeUsers: make(map[podID]map[svcID]int), nodeTopo: make(map[podID]string)}
}

// nodeChange records a node's topology labels and returns the services
// whose endpoints on it change locality: those with endpoints there, when
// the labels changed (or were not known).
func (x *endpointIndex) nodeChange(cluster, name, topology string, deleted bool) []svcID {
	id := podID{cluster, "", name}
	old, known := x.nodeTopo[id]
	if deleted {
		delete(x.nodeTopo, id)
	} else {
		x.nodeTopo[id] = topology
	}
	if known && old == topology && !deleted {
		return nil
	}
	return sortedUsers(x.nodeUsers[id])
}

func sortedUsers(users map[svcID]int) []svcID {
	out := make([]svcID, 0, len(users))
	for s := range users {
		out = append(out, s)
	}
	slices.SortFunc(out, func(a, b svcID) int { return strings.Compare(a.ns+"/"+a.name, b.ns+"/"+b.name) })
	return out
}

// podChange records a pod's labels and returns the services whose
// endpoints it moves between subsets: those whose slices name it, when its
// labels changed (or were not known).
func (x *endpointIndex) podChange(cluster, ns, name, labels string, deleted bool) []svcID {
	id := podID{cluster, ns, name}
	old, known := x.podLabels[id]
	if deleted {
		delete(x.podLabels, id)
	} else {
		x.podLabels[id] = labels
	}
	if known && old == labels && !deleted {
		return nil
	}
	return sortedUsers(x.podUsers[id])
}

// countPods adds delta to the users of the pods sl names.
func (x *endpointIndex) countPods(cluster, ns string, sl slice, delta int) {
	if sl.service == "" {
		return
	}
	svc := svcID{cluster, ns, sl.service}
	for _, p := range sl.pods {
		pns, name, _ := strings.Cut(p, "/")
		if pns == "" {
			pns = ns
		}
		countUser(x.podUsers, podID{cluster, pns, name}, svc, delta)
	}
	for _, n := range sl.nodes {
		countUser(x.nodeUsers, podID{cluster, "", n}, svc, delta)
	}
}

func countUser(users map[podID]map[svcID]int, id podID, svc svcID, delta int) {
	m := users[id]
	if m == nil {
		m = make(map[svcID]int)
		users[id] = m
	}
	if m[svc] += delta; m[svc] <= 0 {
		delete(m, svc)
		if len(m) == 0 {
			delete(users, id)
		}
	}
}

// apply records one slice change and reports whether it needs a full push.
func (x *endpointIndex) apply(cluster, ns, name string, sl slice, deleted bool) bool {
	id := sliceID{cluster, ns, name}
	old, had := x.slices[id]
	if had {
		x.countPods(cluster, ns, old, -1)
	}
	if !deleted {
		x.countPods(cluster, ns, sl, 1)
	}
	if deleted {
		if !had {
			return true // unknown (e.g. before a restart): be conservative
		}
		x.remove(id, old)
		_, still := x.services[svcID{cluster, ns, old.service}]
		return !still // the service's last slice gone: its endpoints vanish
	}
	if had && old.service == sl.service {
		x.slices[id] = sl
		return old.ports != sl.ports
	}
	if had {
		x.remove(id, old) // the slice moved to another service
	}
	svc := svcID{cluster, ns, sl.service}
	first := x.services[svc] == 0
	x.slices[id] = sl
	x.services[svc]++
	return first || had
}

func (x *endpointIndex) remove(id sliceID, old slice) {
	delete(x.slices, id)
	s := svcID{id.cluster, id.ns, old.service}
	if x.services[s]--; x.services[s] <= 0 {
		delete(x.services, s)
	}
}

// toProto converts a debounced request into the wire PushRequest.
func toProto(r *debounce.Request) *pb.PushRequest {
	out := &pb.PushRequest{
		Full:         r.Full,
		Reasons:      make(map[string]int32, len(r.Reasons)),
		ThroughSeq:   r.ThroughSeq,
		FirstSeq:     r.FirstSeq,
		MergedEvents: int32(r.Merged),
		Covered:      ranges(r.Seqs),
	}
	if !r.Start.IsZero() {
		out.Start = timestampOf(r.Start)
	}
	for k, v := range r.Reasons {
		out.Reasons[k] = int32(v)
	}
	for _, k := range r.ConfigKeys {
		out.ConfigKeys = append(out.ConfigKeys, &pb.ConfigKey{Kind: k.Kind, Namespace: k.Namespace, Name: k.Name, Cluster: k.Cluster})
	}
	return out
}

// ranges compresses ascending sequences into inclusive ranges.
func ranges(seqs []uint64) []*pb.SeqRange {
	var out []*pb.SeqRange
	for _, s := range seqs {
		if n := len(out); n > 0 && (s == out[n-1].Last || s == out[n-1].Last+1) {
			out[n-1].Last = s
			continue
		}
		out = append(out, &pb.SeqRange{First: s, Last: s})
	}
	return out
}

// covers reports whether seq is in one of the ranges.
func covers(rs []*pb.SeqRange, seq uint64) bool {
	for _, r := range rs {
		if seq >= r.GetFirst() && seq <= r.GetLast() {
			return true
		}
	}
	return false
}
