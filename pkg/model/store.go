package model

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"sync"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
)

// ErrAlreadyApplied is returned by [Store.Apply] for a record whose sequence
// is not above the applied sequence, as after a redelivery. The store is
// unchanged; callers replaying a stream may ignore it.
var ErrAlreadyApplied = errors.New("sequence already applied")

// Store holds every object of the change stream, keyed by [ObjectKey], and
// builds [Mesh] snapshots from them. It is safe for one goroutine calling
// Apply and any number calling the other methods.
type Store struct {
	mu sync.RWMutex // guards every field below

	applied uint64
	objects map[ObjectKey]*entry

	// Indexes of the decoded kinds, by the mesh service they belong to.
	services   map[serviceKey]map[string]*corev1.Service             // cluster id → Service
	slices     map[serviceKey]map[sliceID]*discoveryv1.EndpointSlice // by kubernetes.io/service-name
	sliceOwner map[ObjectKey]serviceKey                              // the service a stored slice joins

	// Services touched since mesh was built, and the last snapshot.
	dirty map[serviceKey]struct{}
	mesh  *Mesh
}

// entry is one stored object: its identity and the record that last wrote
// it, and for the kinds the mesh reads, the decoded fields (svc or slice).
// Other kinds are only validated and counted: their bodies stay in the
// change stream, where the history CLI reads them.
type entry struct {
	uid, resourceVersion string
	seq                  uint64
	svc                  *corev1.Service
	slice                *discoveryv1.EndpointSlice
}

// NewStore returns an empty store at sequence 0.
func NewStore() *Store {
	empty, _ := NewMesh(0, nil)
	return &Store{
		objects:    make(map[ObjectKey]*entry),
		services:   make(map[serviceKey]map[string]*corev1.Service),
		slices:     make(map[serviceKey]map[sliceID]*discoveryv1.EndpointSlice),
		sliceOwner: make(map[ObjectKey]serviceKey),
		dirty:      make(map[serviceKey]struct{}),
		mesh:       empty,
	}
}

// AppliedSeq returns the sequence of the last applied record.
func (s *Store) AppliedSeq() uint64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.applied
}

// Apply applies one change record carrying change-stream sequence seq.
// Records must come in increasing sequence order (gaps are fine); a sequence
// at or below [Store.AppliedSeq] returns [ErrAlreadyApplied] and changes
// nothing. Any other record advances the applied sequence, even when it is
// rejected: a record that cannot be decoded returns an error and leaves the
// object as it was before the record.
func (s *Store) Apply(rec *pb.ChangeRecord, seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq <= s.applied {
		return fmt.Errorf("apply seq %d (applied %d): %w", seq, s.applied, ErrAlreadyApplied)
	}
	s.applied = seq
	if err := s.apply(rec, seq); err != nil {
		return fmt.Errorf("apply seq %d: %w", seq, err)
	}
	return nil
}

func (s *Store) apply(rec *pb.ChangeRecord, seq uint64) error {
	ref := rec.GetRef()
	if ref == nil {
		return errors.New("record has no object ref")
	}
	key := ObjectKey{Cluster: rec.GetCluster(), Group: ref.GetGroup(), Kind: ref.GetKind(), Namespace: ref.GetNamespace(), Name: ref.GetName()}
	if key.Kind == "" || key.Name == "" {
		return fmt.Errorf("object %s: kind and name are required", key)
	}
	switch rec.GetOp() {
	case pb.Op_OP_ADD, pb.Op_OP_UPDATE:
		e, err := decode(key, rec.GetObject())
		if err != nil {
			return fmt.Errorf("%s %s: %w", rec.GetOp(), key, err)
		}
		e.uid, e.resourceVersion, e.seq = rec.GetUid(), rec.GetResourceVersion(), seq
		s.remove(key)
		s.insert(key, e)
		return nil
	case pb.Op_OP_DELETE:
		s.remove(key)
		return nil
	default:
		return fmt.Errorf("object %s: unknown op %v", key, rec.GetOp())
	}
}

// sliceEndpoint is the part of an EndpointSlice endpoint the mesh reads.
type sliceEndpoint struct {
	Addresses  []string `json:"addresses"`
	Conditions struct {
		Ready *bool `json:"ready"`
	} `json:"conditions"`
	NodeName *string `json:"nodeName"`
	Zone     *string `json:"zone"`
}

// decode parses an object according to its kind.
func decode(key ObjectKey, raw []byte) (*entry, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return nil, errors.New("object is not a JSON object")
	}
	switch {
	case key.isService():
		// Only the fields the mesh reads are decoded: skipping the rest
		// (metadata, status) is what makes replay fast. The whole object
		// stays in the change stream.
		var v struct {
			Spec struct {
				Type         corev1.ServiceType   `json:"type"`
				ExternalName string               `json:"externalName"`
				ClusterIP    string               `json:"clusterIP"`
				Ports        []corev1.ServicePort `json:"ports"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("decode Service: %w", err)
		}
		svc := &corev1.Service{Spec: corev1.ServiceSpec{Type: v.Spec.Type, ExternalName: v.Spec.ExternalName, ClusterIP: v.Spec.ClusterIP, Ports: v.Spec.Ports}}
		return &entry{svc: svc}, nil
	case key.isEndpointSlice():
		var v struct {
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
			AddressType discoveryv1.AddressType    `json:"addressType"`
			Ports       []discoveryv1.EndpointPort `json:"ports"`
			Endpoints   []sliceEndpoint            `json:"endpoints"`
		}
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, fmt.Errorf("decode EndpointSlice: %w", err)
		}
		sl := &discoveryv1.EndpointSlice{AddressType: v.AddressType, Ports: v.Ports, Endpoints: make([]discoveryv1.Endpoint, len(v.Endpoints))}
		sl.Labels = v.Metadata.Labels
		for i, e := range v.Endpoints {
			sl.Endpoints[i] = discoveryv1.Endpoint{Addresses: e.Addresses, Conditions: discoveryv1.EndpointConditions{Ready: e.Conditions.Ready}, NodeName: e.NodeName, Zone: e.Zone}
		}
		return &entry{slice: sl}, nil
	default:
		if !json.Valid(raw) {
			return nil, errors.New("invalid JSON")
		}
		return &entry{}, nil
	}
}

// insert stores e under key and indexes it. key must not be stored.
func (s *Store) insert(key ObjectKey, e *entry) {
	s.objects[key] = e
	switch {
	case e.svc != nil:
		sk := serviceKey{Namespace: key.Namespace, Name: key.Name}
		byCluster := s.services[sk]
		if byCluster == nil {
			byCluster = make(map[string]*corev1.Service)
			s.services[sk] = byCluster
		}
		byCluster[key.Cluster] = e.svc
		s.dirty[sk] = struct{}{}
	case e.slice != nil:
		name := e.slice.Labels[discoveryv1.LabelServiceName]
		if name == "" {
			return // joins no service
		}
		sk := serviceKey{Namespace: key.Namespace, Name: name}
		bySlice := s.slices[sk]
		if bySlice == nil {
			bySlice = make(map[sliceID]*discoveryv1.EndpointSlice)
			s.slices[sk] = bySlice
		}
		bySlice[sliceID{Cluster: key.Cluster, Name: key.Name}] = e.slice
		s.sliceOwner[key] = sk
		s.dirty[sk] = struct{}{}
	}
}

// remove forgets key and unindexes it; removing a missing key is a no-op.
func (s *Store) remove(key ObjectKey) {
	e := s.objects[key]
	if e == nil {
		return
	}
	delete(s.objects, key)
	switch {
	case e.svc != nil:
		sk := serviceKey{Namespace: key.Namespace, Name: key.Name}
		delete(s.services[sk], key.Cluster)
		if len(s.services[sk]) == 0 {
			delete(s.services, sk)
		}
		s.dirty[sk] = struct{}{}
	case e.slice != nil:
		sk, ok := s.sliceOwner[key]
		if !ok {
			return
		}
		delete(s.sliceOwner, key)
		delete(s.slices[sk], sliceID{Cluster: key.Cluster, Name: key.Name})
		if len(s.slices[sk]) == 0 {
			delete(s.slices, sk)
		}
		s.dirty[sk] = struct{}{}
	}
}

// Len returns the number of stored objects of every kind.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.objects)
}
