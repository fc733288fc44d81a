package debouncer

import (
	"encoding/json"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/debounce"
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
// EDS updates by service; everything else is a full push keyed by itself.
func toEvent(data []byte, seq uint64) (debounce.Event, *pb.ChangeRecord, error) {
	rec := &pb.ChangeRecord{}
	if err := proto.Unmarshal(data, rec); err != nil {
		return debounce.Event{}, nil, fmt.Errorf("decode change record seq %d: %w", seq, err)
	}
	ref := rec.GetRef()
	ev := debounce.Event{Seq: seq, Full: true, Reason: ReasonConfig}
	if t := rec.GetObservedAt(); t != nil {
		ev.Start = t.AsTime()
	}
	key := debounce.ConfigKey{Kind: ref.GetKind(), Namespace: ref.GetNamespace(), Name: ref.GetName(), Cluster: rec.GetCluster()}
	switch {
	case ref.GetGroup() == "discovery.k8s.io" && ref.GetKind() == "EndpointSlice":
		ev.Full = false
		ev.Reason = ReasonEndpoint
		if svc := sliceService(rec.GetObject()); svc != "" {
			key = debounce.ConfigKey{Kind: "Service", Namespace: ref.GetNamespace(), Name: svc, Cluster: rec.GetCluster()}
		}
	case ref.GetGroup() == "" && ref.GetKind() == "Service":
		ev.Reason = ReasonService
	case ref.GetGroup() == "" && (ref.GetKind() == "Pod" || ref.GetKind() == "Node" || ref.GetKind() == "Namespace"):
		ev.Reason = ReasonProxy
	}
	ev.ConfigKeys = []debounce.ConfigKey{key}
	return ev, rec, nil
}

// sliceService reads the service-name label of an EndpointSlice object.
func sliceService(obj []byte) string {
	var o struct {
		Metadata struct {
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
	}
	if len(obj) == 0 || json.Unmarshal(obj, &o) != nil {
		return ""
	}
	return o.Metadata.Labels[serviceNameLabel]
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
