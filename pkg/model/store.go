package model

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	networkingv1 "istio.io/api/networking/v1"
	securityv1 "istio.io/api/security/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
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

	// set at construction
	meshCfg  *meshconfig.MeshConfig
	settings *meshSettings // what meshes read of meshCfg
	// settingsProblems are the mesh config's defaults settings left out.
	settingsProblems []Problem
	buildWorkers     int // goroutines a large rebuild may use (snapshot.go)

	// Indexes of the decoded kinds, by the mesh service they belong to.
	services map[serviceKey]map[string]*slimService // cluster id → Service
	slices   map[serviceKey]map[sliceID]*slimSlice  // by kubernetes.io/service-name
	pods     map[podKey]*pod
	podUsers podUsers // services whose slices name the pod, how many times
	// usersIndexed: podUsers and nodeUsers are built (indexUsers) and kept
	// by every slice change.
	usersIndexed bool
	nodes        map[nodeKey]*node
	nodeUsers    map[nodeKey]map[serviceKey]int // services whose slice endpoints name the node

	// Istio config, rebuilt as a whole when any of it changes.
	rules     map[ObjectKey]*storedRule
	entries   map[ObjectKey]*storedEntry
	workloads map[ObjectKey]*storedWorkload
	sidecars  map[ObjectKey]*storedSidecar
	peers     map[ObjectKey]*storedPeerAuthn
	policies  map[ObjectKey]*storedPolicy // AuthorizationPolicy, RequestAuthentication (authz.go)
	// Routing config (virtualservice.go); routingDirty when any changed.
	virtualServices map[ObjectKey]*VirtualServiceInput
	gateways        map[ObjectKey]*GatewayInput
	routingDirty    bool
	// Gateway API objects (gatewayapi.go), converted into routing inputs;
	// gatewayAPIRefsGen counts the changes to the Services and
	// ServiceEntries its references resolve against (gatewayAPIRef), and
	// gatewayAPIRefsSeen is the count the last rebuild saw.
	gatewayAPI         map[ObjectKey]*storedGatewayAPI
	gatewayAPIRefsGen  uint64
	gatewayAPIRefsSeen uint64
	routeIdx           *routeIndex
	// undecodable: objects whose last record could not be decoded (the
	// previous version stays), reported as problems.
	undecodable map[ObjectKey]string
	// unsupported: the problems of the objects of kinds the model does
	// not translate (unsupported.go).
	unsupported map[ObjectKey][]Problem
	// entryProblems are the ServiceEntry problems of the last rebuild.
	entryProblems []Problem

	// Services touched since mesh was built, and the last snapshot.
	dirty         map[serviceKey]struct{}
	rulesDirty    bool // a DestinationRule changed
	entriesDirty  bool // a ServiceEntry, WorkloadEntry or selected Pod changed
	sidecarsDirty bool // a Sidecar changed
	peersDirty    bool // a PeerAuthentication changed
	policiesDirty bool // an AuthorizationPolicy or RequestAuthentication changed
	problemsDirty bool
	ruleIdx       *ruleIndex
	sidecarIdx    *sidecarIndex // nil without Sidecars
	peerIdx       *peerIndex    // never nil
	authzIdx      *authzIndex   // never nil
	mesh          *Mesh
}

// entry is one stored object: its identity and the record that last wrote
// it, and for the kinds the mesh reads, the decoded fields (svc or slice).
// Other kinds are only validated and counted: their bodies stay in the
// change stream, where the history CLI reads them.
type entry struct {
	uid, resourceVersion string
	seq                  uint64
	svc                  *slimService
	slice                *slimSlice
	pod                  *pod
	node                 *node
	rule                 *storedRule
	se                   *storedEntry
	we                   *storedWorkload
	sidecar              *storedSidecar
	peer                 *storedPeerAuthn
	policy               *storedPolicy
	vs                   *VirtualServiceInput
	gw                   *GatewayInput
	gwapi                *storedGatewayAPI
	unsupported          []Problem // of a kind the model does not translate
}

// Option configures a [Store].
type Option func(*Store)

// WithMeshConfig sets the mesh config the store applies (root namespace,
// default exportTo, default traffic policy). Without it, Istio's defaults.
func WithMeshConfig(c *meshconfig.MeshConfig) Option {
	return func(s *Store) { s.meshCfg = c }
}

// WithBuildWorkers sets how many goroutines a snapshot may use to build
// services when many changed at once (a replay's first snapshot).
// Without it, GOMAXPROCS at construction; 1 builds on the caller's
// goroutine only.
func WithBuildWorkers(n int) Option {
	return func(s *Store) { s.buildWorkers = max(n, 1) }
}

// NewStore returns an empty store at sequence 0.
func NewStore(opts ...Option) *Store {
	empty, _ := NewMesh(0, nil)
	s := &Store{
		objects:         make(map[ObjectKey]*entry),
		services:        make(map[serviceKey]map[string]*slimService),
		slices:          make(map[serviceKey]map[sliceID]*slimSlice),
		pods:            make(map[podKey]*pod),
		podUsers:        make(podUsers),
		nodes:           make(map[nodeKey]*node),
		nodeUsers:       make(map[nodeKey]map[serviceKey]int),
		rules:           make(map[ObjectKey]*storedRule),
		entries:         make(map[ObjectKey]*storedEntry),
		workloads:       make(map[ObjectKey]*storedWorkload),
		sidecars:        make(map[ObjectKey]*storedSidecar),
		peers:           make(map[ObjectKey]*storedPeerAuthn),
		peerIdx:         emptyPeers,
		policies:        make(map[ObjectKey]*storedPolicy),
		authzIdx:        emptyAuthz,
		virtualServices: make(map[ObjectKey]*VirtualServiceInput),
		gateways:        make(map[ObjectKey]*GatewayInput),
		gatewayAPI:      make(map[ObjectKey]*storedGatewayAPI),
		routeIdx:        emptyRoutes(),
		undecodable:     make(map[ObjectKey]string),
		unsupported:     make(map[ObjectKey][]Problem),
		dirty:           make(map[serviceKey]struct{}),
		ruleIdx:         emptyRules(),
		mesh:            empty,
		buildWorkers:    runtime.GOMAXPROCS(0),
	}
	for _, o := range opts {
		o(s)
	}
	s.ruleIdx.root = s.meshCfg.RootNamespace()
	empty.content.rules = s.ruleIdx
	empty.content.routes = s.routeIdx
	s.settings, s.settingsProblems = settingsOf(s.meshCfg)
	empty.content.settings = s.settings
	return s
}

// maxReserve bounds each count of a Reservation: about 100 MB of index.
const maxReserve = 1 << 20

// Reservation is what a replay is about to apply: its objects (a
// snapshot's live count), and of them Services and EndpointSlices (0:
// not known).
type Reservation struct {
	Objects, Services, EndpointSlices int
}

// Reserve makes room for r in an empty store: the object index, and the
// indexes by service, are allocated once instead of growing and
// rehashing their keys all along the replay (in a profile of a frontend
// starting from a snapshot, more than half of applying records). It does
// nothing to a store that holds objects, and each count is bounded by
// maxReserve (they come from a snapshot's metadata: a bogus count must
// not take the memory).
func (s *Store) Reserve(r Reservation) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.objects) != 0 {
		return
	}
	reserve(&s.objects, r.Objects)
	reserve(&s.services, r.Services)
	reserve(&s.slices, r.Services)
	reserve(&s.dirty, r.Services) // a store emptied by deletes may hold marks
}

// reserve replaces an empty map with one sized for n (at most maxReserve).
func reserve[K comparable, V any](m *map[K]V, n int) {
	if n = min(n, maxReserve); n > 0 && len(*m) == 0 {
		*m = make(map[K]V, n)
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
	d := Decode(rec)
	return s.applyDecoded(&d, seq)
}

// ApplyDecoded is [Store.Apply] of a record [Decode] has decoded, with the
// same results and errors: it only does the part that reads and changes
// the store. Callers decode records on other goroutines and apply them
// here in sequence order.
func (s *Store) ApplyDecoded(d *Decoded, seq uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq <= s.applied {
		return fmt.Errorf("apply seq %d (applied %d): %w", seq, s.applied, ErrAlreadyApplied)
	}
	return s.applyDecoded(d, seq)
}

// applyDecoded applies d at seq, which is above the applied sequence.
func (s *Store) applyDecoded(d *Decoded, seq uint64) error {
	s.applied = seq
	if err := s.apply(d, seq); err != nil {
		return fmt.Errorf("apply seq %d: %w", seq, err)
	}
	return nil
}

// Decoded is a change record with its object decoded ([Decode]): what
// applying it reads of the record, without the record.
type Decoded struct {
	hasRef               bool // the record names an object
	op                   pb.Op
	uid, resourceVersion string
	key                  ObjectKey
	e                    *entry // the decoded object of an add or update with a valid ref
	err                  error  // why the object of such a record does not decode
}

// Key is the object the record is of.
func (d *Decoded) Key() ObjectKey { return d.key }

// Decode decodes the object of an add or update, the part of applying a
// record that reads nothing but the record. It may run on any goroutine,
// ahead of [Store.ApplyDecoded]; every error is left for ApplyDecoded to
// return. The result owns what it decoded, so apply it at most once.
func Decode(rec *pb.ChangeRecord) Decoded {
	ref := rec.GetRef()
	key := ObjectKey{Cluster: rec.GetCluster(), Group: ref.GetGroup(), Kind: ref.GetKind(), Namespace: ref.GetNamespace(), Name: ref.GetName()}
	return decodeRecord(ref != nil, key, rec.GetOp(), rec.GetUid(), rec.GetResourceVersion(), rec.GetObject())
}

// decodeRecord is Decode of a record's fields.
func decodeRecord(hasRef bool, key ObjectKey, op pb.Op, uid, resourceVersion string, object []byte) Decoded {
	d := Decoded{op: op, uid: uid, resourceVersion: resourceVersion}
	if !hasRef {
		return d
	}
	d.hasRef, d.key = true, key
	if d.key.Kind == "" || d.key.Name == "" {
		return d
	}
	if op == pb.Op_OP_ADD || op == pb.Op_OP_UPDATE {
		d.e, d.err = decode(d.key, object)
	}
	return d
}

func (s *Store) apply(d *Decoded, seq uint64) error {
	if !d.hasRef {
		return errors.New("record has no object ref")
	}
	key := d.key
	if key.Kind == "" || key.Name == "" {
		return fmt.Errorf("object %s: kind and name are required", key)
	}
	defer s.noteGatewayAPIRef(key, s.gatewayAPIRefOf(key))
	switch d.op {
	case pb.Op_OP_ADD, pb.Op_OP_UPDATE:
		e, err := d.e, d.err
		if err != nil {
			if key.Group == GroupNetworking || isUnsupported(key) || key.isPeerAuthentication() || key.isAuthPolicy() {
				s.undecodable[key] = fmt.Sprintf("record seq %d cannot be decoded (%v): the previous version, if any, stays", seq, err)
				s.problemsDirty = true
			}
			return fmt.Errorf("%s %s: %w", d.op, key, err)
		}
		if _, ok := s.undecodable[key]; ok {
			delete(s.undecodable, key)
			s.problemsDirty = true
		}
		e.uid, e.resourceVersion, e.seq = d.uid, d.resourceVersion, seq
		old := s.objects[key]
		if old != nil && (e.pod != nil && samePod(old.pod, e.pod) || e.node != nil && old.node != nil && *old.node == *e.node) {
			// Status churn: nothing the mesh reads changed.
			old.uid, old.resourceVersion, old.seq = e.uid, e.resourceVersion, e.seq
			return nil
		}
		s.removeEntry(key, old)
		s.insert(key, e)
		return nil
	case pb.Op_OP_DELETE:
		if _, ok := s.undecodable[key]; ok {
			delete(s.undecodable, key)
			s.problemsDirty = true
		}
		s.removeEntry(key, s.objects[key])
		return nil
	default:
		return fmt.Errorf("object %s: unknown op %v", key, d.op)
	}
}

// sliceEndpoint is the part of an EndpointSlice endpoint the mesh reads.
type sliceEndpoint struct {
	Addresses  []string `json:"addresses"`
	Conditions struct {
		Ready *bool `json:"ready"`
	} `json:"conditions"`
	NodeName  *string `json:"nodeName"`
	Zone      *string `json:"zone"`
	TargetRef *struct {
		Kind      string `json:"kind"`
		Namespace string `json:"namespace"`
		Name      string `json:"name"`
	} `json:"targetRef"`
}

// decode parses an object according to its kind.
func decode(key ObjectKey, raw []byte) (*entry, error) {
	if t := bytes.TrimSpace(raw); len(t) == 0 || t[0] != '{' {
		return nil, errors.New("object is not a JSON object")
	}
	if e, ok, err := decodeRouting(key, raw); ok {
		return e, err
	}
	if e, ok, err := decodeGatewayAPI(key, raw); ok {
		return e, err
	}
	switch {
	case key.isService():
		return decodeService(raw)
	case key.isEndpointSlice():
		return decodeEndpointSlice(raw)
	case key.isPod():
		p, err := decodePod(raw)
		if err != nil {
			return nil, err
		}
		return &entry{pod: p}, nil
	case key.isNode():
		n, err := decodeNode(raw)
		if err != nil {
			return nil, err
		}
		return &entry{node: n}, nil
	case key.isNetworking(KindDestinationRule):
		spec := &networkingv1.DestinationRule{}
		created, err := decodeIstio(raw, spec)
		if err != nil {
			return nil, fmt.Errorf("decode DestinationRule: %w", err)
		}
		return &entry{rule: &storedRule{key: key, created: created, spec: spec}}, nil
	case key.isNetworking(KindServiceEntry):
		spec := &networkingv1.ServiceEntry{}
		created, err := decodeIstio(raw, spec)
		if err != nil {
			return nil, fmt.Errorf("decode ServiceEntry: %w", err)
		}
		return &entry{se: &storedEntry{key: key, created: created, spec: spec}}, nil
	case key.isNetworking(KindWorkloadEntry):
		spec := &networkingv1.WorkloadEntry{}
		if _, err := decodeIstio(raw, spec); err != nil {
			return nil, fmt.Errorf("decode WorkloadEntry: %w", err)
		}
		return &entry{we: &storedWorkload{key: key, spec: spec}}, nil
	case key.isNetworking(KindSidecar):
		spec := &networkingv1.Sidecar{}
		created, err := decodeIstio(raw, spec)
		if err != nil {
			return nil, fmt.Errorf("decode Sidecar: %w", err)
		}
		return &entry{sidecar: &storedSidecar{key: key, created: created, spec: spec}}, nil
	case key.isPeerAuthentication():
		spec := &securityv1.PeerAuthentication{}
		created, err := decodeIstio(raw, spec)
		if err != nil {
			return nil, fmt.Errorf("decode PeerAuthentication: %w", err)
		}
		return &entry{peer: &storedPeerAuthn{key: key, created: created, spec: spec}}, nil
	case key.isAuthPolicy():
		return decodePolicy(key, raw)
	default:
		if !json.Valid(raw) {
			return nil, errors.New("invalid JSON")
		}
		return &entry{unsupported: unsupportedProblems(key, raw)}, nil
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
			byCluster = make(map[string]*slimService)
			s.services[sk] = byCluster
		}
		byCluster[key.Cluster] = e.svc
		s.dirty[sk] = struct{}{}
	case e.slice != nil:
		name := e.slice.serviceName
		if name == "" {
			return // joins no service
		}
		sk := serviceKey{Namespace: key.Namespace, Name: name}
		bySlice := s.slices[sk]
		if bySlice == nil {
			bySlice = make(map[sliceID]*slimSlice)
			s.slices[sk] = bySlice
		}
		bySlice[sliceID{Cluster: key.Cluster, Name: key.Name}] = e.slice
		s.dirty[sk] = struct{}{}
		s.countPodUsers(key, e.slice, sk, 1)
	case e.pod != nil:
		pk := podKey{Cluster: key.Cluster, Namespace: key.Namespace, Name: key.Name}
		s.pods[pk] = e.pod
		s.podChanged(pk)
	case e.node != nil:
		nk := nodeKey{Cluster: key.Cluster, Name: key.Name}
		s.nodes[nk] = e.node
		s.nodeChanged(nk)
	case e.rule != nil:
		s.rules[key] = e.rule
		s.rulesDirty = true
	case e.se != nil:
		s.entries[key] = e.se
		s.entriesDirty = true
	case e.we != nil:
		s.workloads[key] = e.we
		s.entriesDirty = true
	case e.sidecar != nil:
		s.sidecars[key] = e.sidecar
		s.sidecarsDirty = true
	case e.peer != nil:
		s.peers[key] = e.peer
		s.peersDirty = true
	case e.policy != nil:
		s.policies[key] = e.policy
		s.policiesDirty = true
	case e.vs != nil:
		s.virtualServices[key] = e.vs
		s.routingDirty = true
	case e.gw != nil:
		s.gateways[key] = e.gw
		s.routingDirty = true
	case e.gwapi != nil:
		s.gatewayAPI[key] = e.gwapi
		s.routingDirty = true
	case e.unsupported != nil:
		s.unsupported[key] = e.unsupported
		s.problemsDirty = true
	}
}

// countPodUsers adds delta to the count of each pod and node the slice's
// endpoints name, for service sk, once the users index is built.
func (s *Store) countPodUsers(key ObjectKey, sl *slimSlice, sk serviceKey, delta int) {
	if !s.usersIndexed {
		return
	}
	for _, ep := range sl.endpoints {
		if ep.nodeName != "" {
			countUser(s.nodeUsers, nodeKey{Cluster: key.Cluster, Name: ep.nodeName}, sk, delta)
		}
		if ep.podName == "" {
			continue
		}
		pk := podKey{Cluster: key.Cluster, Namespace: cmp.Or(ep.podNamespace, key.Namespace), Name: ep.podName}
		s.podUsers.add(pk, sk, delta)
	}
}

// indexUsers builds the index of the pods and nodes each service's slices
// name (podUsers, nodeUsers) from the slices stored, the first time a pod
// or a node changes; from then on each slice change keeps it. Until a pod
// or a node comes, nothing reads it: a replay of services and slices alone
// (a file source, a mesh without pod records) never builds it, which was
// half of applying its slices.
func (s *Store) indexUsers() {
	if s.usersIndexed {
		return
	}
	s.usersIndexed = true
	for sk, bySlice := range s.slices {
		for id, sl := range bySlice {
			s.countPodUsers(ObjectKey{Cluster: id.Cluster, Namespace: sk.Namespace}, sl, sk, 1)
		}
	}
}

// podChanged marks what reads the pod's labels: the services whose slices
// name it, and ServiceEntries selecting workloads in its namespace.
func (s *Store) podChanged(pk podKey) {
	s.indexUsers()
	s.podUsers.each(pk, func(sk serviceKey) { s.dirty[sk] = struct{}{} })
	if s.entriesDirty {
		return
	}
	for _, se := range s.entries {
		if se.key.Namespace == pk.Namespace && se.spec.GetWorkloadSelector() != nil {
			s.entriesDirty = true
			return
		}
	}
}

// removeEntry forgets key, under which e is stored, and unindexes it; e
// nil (nothing stored) is a no-op.
func (s *Store) removeEntry(key ObjectKey, e *entry) {
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
		name := e.slice.serviceName // the service it joined, as insert had it
		if name == "" {
			return
		}
		sk := serviceKey{Namespace: key.Namespace, Name: name}
		delete(s.slices[sk], sliceID{Cluster: key.Cluster, Name: key.Name})
		if len(s.slices[sk]) == 0 {
			delete(s.slices, sk)
		}
		s.dirty[sk] = struct{}{}
		s.countPodUsers(key, e.slice, sk, -1)
	case e.pod != nil:
		pk := podKey{Cluster: key.Cluster, Namespace: key.Namespace, Name: key.Name}
		delete(s.pods, pk)
		s.podChanged(pk)
	case e.node != nil:
		nk := nodeKey{Cluster: key.Cluster, Name: key.Name}
		delete(s.nodes, nk)
		s.nodeChanged(nk)
	case e.rule != nil:
		delete(s.rules, key)
		s.rulesDirty = true
	case e.se != nil:
		delete(s.entries, key)
		s.entriesDirty = true
	case e.we != nil:
		delete(s.workloads, key)
		s.entriesDirty = true
	case e.sidecar != nil:
		delete(s.sidecars, key)
		s.sidecarsDirty = true
	case e.peer != nil:
		delete(s.peers, key)
		s.peersDirty = true
	case e.policy != nil:
		delete(s.policies, key)
		s.policiesDirty = true
	case e.vs != nil:
		delete(s.virtualServices, key)
		s.routingDirty = true
	case e.gw != nil:
		delete(s.gateways, key)
		s.routingDirty = true
	case e.gwapi != nil:
		delete(s.gatewayAPI, key)
		s.routingDirty = true
	case e.unsupported != nil:
		delete(s.unsupported, key)
		s.problemsDirty = true
	}
}

// exportToAnnotation is Istio's annotation for a Service's visibility.
const exportToAnnotation = "networking.istio.io/exportTo"

// decodeIstio decodes an Istio config object: its spec into spec (with
// Istio's JSON names; unknown fields are ignored, as a newer API may add
// them) and its creation time.
func decodeIstio(raw []byte, spec proto.Message) (time.Time, error) {
	var v struct {
		Metadata struct {
			CreationTimestamp metav1.Time `json:"creationTimestamp"`
		} `json:"metadata"`
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(raw, &v); err != nil {
		return time.Time{}, err
	}
	if len(v.Spec) > 0 && string(v.Spec) != "null" {
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(v.Spec, spec); err != nil {
			return time.Time{}, fmt.Errorf("spec: %w", err)
		}
	}
	return v.Metadata.CreationTimestamp.Time, nil
}

// Len returns the number of stored objects of every kind.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.objects)
}

// countUser adds delta to the count of users[k][sk], dropping what falls
// to zero.
func countUser[K comparable](users map[K]map[serviceKey]int, k K, sk serviceKey, delta int) {
	m := users[k]
	if m == nil {
		m = make(map[serviceKey]int)
		users[k] = m
	}
	if m[sk] += delta; m[sk] <= 0 {
		delete(m, sk)
		if len(m) == 0 {
			delete(users, k)
		}
	}
}
