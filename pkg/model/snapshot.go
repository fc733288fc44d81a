package model

import (
	"maps"
	"slices"
	"strings"
	"sync"
)

// Snapshot returns an immutable view of the mesh at [Store.AppliedSeq]. It
// returns the same *Mesh until the next Apply; after one, it rebuilds only the
// services the applied records touched, and keeps the *Service of every other
// service (and of any touched service whose content did not change).
// A change to DestinationRules revisits every service (a rule's host may
// be a wildcard) but keeps those whose rules are the same; a change to
// ServiceEntries, WorkloadEntries or Pods they select rebuilds the
// ServiceEntry services, keeping the unchanged ones.
func (s *Store) Snapshot() *Mesh {
	s.mu.RLock()
	m := s.mesh
	fresh := m.Seq == s.applied
	s.mu.RUnlock()
	if fresh {
		return m
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mesh.Seq != s.applied {
		s.mesh = s.rebuild()
	}
	return s.mesh
}

// rebuildState is one rebuild in progress.
type rebuildState struct {
	prev          *Mesh
	byHost        map[string]*Service // copied on first change
	reorder       bool                // a service came or went
	configChanged bool                // something other than endpoints changed
}

func (r *rebuildState) hosts() map[string]*Service {
	if r.byHost == nil {
		r.byHost = maps.Clone(r.prev.content.byHost)
	}
	return r.byHost
}

func (r *rebuildState) current() map[string]*Service {
	if r.byHost != nil {
		return r.byHost
	}
	return r.prev.content.byHost
}

// put replaces the service at host by next (nil removes it), keeping old's
// pointer when nothing changed and its config memo when only endpoints did.
func (r *rebuildState) put(host string, old, next *Service) {
	sameConfig := next != nil && old != nil && old.sameConfig(next)
	switch {
	case next == nil && old == nil:
		return
	case sameConfig && old.sameEndpoints(next):
		return
	}
	byHost := r.hosts()
	switch {
	case next == nil:
		delete(byHost, host)
		r.reorder = true
	case old == nil:
		next.config = new(memo)
		byHost[host] = next
		r.reorder = true
	case sameConfig:
		next.config = old.config
		byHost[host] = next
	default:
		next.config = new(memo)
		byHost[host] = next
		r.configChanged = true
	}
}

// rebuild derives the next mesh from the previous one and the dirty
// services. Callers hold mu.
func (s *Store) rebuild() *Mesh {
	r := &rebuildState{prev: s.mesh}
	defaultExportTo := s.meshCfg.DefaultServiceExportTo()
	rulesChanged := s.rulesDirty
	if s.rulesDirty {
		stored := slices.Collect(maps.Values(s.rules))
		s.ruleIdx = buildRules(stored, s.meshCfg.RootNamespace(), s.meshCfg.DefaultDestinationRuleExportTo(), s.ruleIdx)
		s.rulesDirty = false
		s.problemsDirty = true
	}
	peersChanged := s.peersDirty
	if s.peersDirty {
		s.peerIdx = buildPeerIndex(slices.Collect(maps.Values(s.peers)), s.meshCfg.RootNamespace())
		s.peersDirty = false
		s.problemsDirty = true
	}
	sidecarsChanged := s.sidecarsDirty
	if s.sidecarsDirty {
		s.sidecarIdx = nil
		if len(s.sidecars) > 0 {
			s.sidecarIdx = buildSidecars(slices.Collect(maps.Values(s.sidecars)), s.meshCfg.RootNamespace(), s.meshCfg.OutboundMode())
		}
		s.sidecarsDirty = false
		s.problemsDirty = true
	}
	policiesChanged := s.policiesDirty
	if s.policiesDirty {
		s.authzIdx = buildAuthzIndex(slices.Collect(maps.Values(s.policies)), s.meshCfg.RootNamespace(), s.meshCfg.Proto().GetExtensionProviders())
		s.policiesDirty = false
		s.problemsDirty = true
	}
	if s.gatewayAPIRefsSeen != s.gatewayAPIRefsGen {
		// Gateway API references resolve against the services: convert
		// again when a Service or ServiceEntry came or went.
		s.gatewayAPIRefsSeen = s.gatewayAPIRefsGen
		if len(s.gatewayAPI) > 0 {
			s.routingDirty = true
		}
	}
	routingChanged := s.routingDirty
	if s.routingDirty {
		vss, gws := s.routingInputs()
		s.routeIdx = buildRoutes(vss, gws, orPublic(s.meshCfg.Proto().GetDefaultVirtualServiceExportTo()), s.routeIdx)
		s.routingDirty = false
		s.problemsDirty = true
	}
	s.eachDirtyBuilt(defaultExportTo, func(sk serviceKey, next *Service) {
		var host string
		if next != nil {
			host = next.Hostname
		} else {
			host = Hostname(sk.Namespace, sk.Name)
		}
		old := r.prev.content.byHost[host]
		if old != nil && old.Registry != Kubernetes {
			old = nil // a ServiceEntry had the host: it is reported below
			s.entriesDirty = true
		}
		if (next == nil) != (old == nil) && len(s.entries) > 0 {
			s.entriesDirty = true // a ServiceEntry host may be freed or taken
		}
		r.put(host, old, next)
	})
	clear(s.dirty)
	if s.entriesDirty {
		s.rebuildEntries(r)
	}
	if rulesChanged || peersChanged {
		for host, svc := range r.current() {
			rules := s.ruleIdx.forService(svc.Hostname, svc.Namespace)
			mtls := s.peerIdx.namespaceMode(svc.Namespace)
			if !slices.Equal(rules, svc.rules) || mtls != svc.mtls {
				r.put(host, svc, svc.withConfig(rules, mtls))
			}
		}
	}
	problems := r.prev.content.problems
	if s.problemsDirty || r.reorder || r.configChanged {
		problems = s.problems(r.current())
		s.problemsDirty = false
	}
	if r.byHost == nil && slices.Equal(problems, r.prev.content.problems) && !rulesChanged && !sidecarsChanged && !routingChanged && !peersChanged && !policiesChanged {
		return r.prev.withSeq(s.applied)
	}
	byHost := r.current()
	var services []*Service
	if r.reorder || r.byHost == nil {
		services = slices.SortedFunc(maps.Values(byHost), func(a, b *Service) int {
			return strings.Compare(a.Hostname, b.Hostname)
		})
	} else {
		services = make([]*Service, len(r.prev.Services))
		for i, old := range r.prev.Services {
			services[i] = byHost[old.Hostname]
		}
	}
	config := r.prev.content.config
	if r.reorder || r.configChanged || rulesChanged || sidecarsChanged || routingChanged || peersChanged || policiesChanged {
		config = new(memo)
	}
	return &Mesh{Seq: s.applied, Services: services, content: &meshContent{
		byHost: byHost, config: config, rules: s.ruleIdx, routes: s.routeIdx, problems: problems,
		settings: s.settings, sidecars: s.sidecarIdx, peers: s.peerIdx, authz: s.authzIdx,
	}}
}

// parallelBuildShare is the fewest dirty services a rebuild hands one
// worker: below twice this the services are built on the caller's
// goroutine. A service of the benchmark mesh (one port, ten endpoints)
// builds in a few microseconds, so a share is about a millisecond of work,
// far above a goroutine's cost; the per-change path (a handful of dirty
// services) never starts one.
const parallelBuildShare = 256

// eachDirtyBuilt builds every dirty service (nil for one that is gone) and
// calls fn with each, on the caller's goroutine. When many services are
// dirty at once (the first snapshot after a replay, or a change that
// touches every service), the builds run on up to s.buildWorkers
// goroutines first: buildService and the rule index only read the store's
// maps, and callers hold mu, so nothing changes under them. fn sees the
// services in no particular order, as a map range would give them.
func (s *Store) eachDirtyBuilt(defaultExportTo []string, fn func(serviceKey, *Service)) {
	build := func(sk serviceKey) *Service {
		next := buildService(sk, s.services[sk], s.slices[sk], s.pods, s.nodes, defaultExportTo)
		if next != nil {
			s.configure(next)
		}
		return next
	}
	workers := min(s.buildWorkers, len(s.dirty)/parallelBuildShare)
	if workers < 2 {
		for sk := range s.dirty {
			fn(sk, build(sk))
		}
		return
	}
	keys := slices.Collect(maps.Keys(s.dirty))
	built := make([]*Service, len(keys))
	share := (len(keys) + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := 0; lo < len(keys); lo += share {
		hi := min(lo+share, len(keys))
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				built[i] = build(keys[i])
			}
		})
	}
	wg.Wait()
	for i, sk := range keys {
		fn(sk, built[i])
	}
}

// rebuildEntries rebuilds the ServiceEntry services. Callers hold mu.
func (s *Store) rebuildEntries(r *rebuildState) {
	s.entriesDirty = false
	s.problemsDirty = true
	workloads := slices.SortedFunc(maps.Values(s.workloads), func(a, b *storedWorkload) int {
		return strings.Compare(objectName(a.key), objectName(b.key))
	})
	built, problems := buildServiceEntries(entrySources{
		entries:   slices.Collect(maps.Values(s.entries)),
		workloads: workloads,
		pods:      s.pods,
		nodes:     s.nodes,
		taken: func(host string) bool {
			svc := r.current()[host]
			return svc != nil && svc.Registry == Kubernetes
		},
		defaultExportTo: s.meshCfg.DefaultServiceExportTo(),
	})
	s.entryProblems = problems
	for host, svc := range r.current() {
		if svc.Registry == ServiceEntryRegistry && built[host] == nil {
			r.put(host, svc, nil)
		}
	}
	for host, next := range built {
		s.configure(next)
		old := r.current()[host]
		r.put(host, old, next)
	}
}

// problems collects what the mesh ignores. Callers hold mu.
func (s *Store) problems(byHost map[string]*Service) []Problem {
	var out []Problem
	out = append(out, s.ruleIdx.problems...)
	out = append(out, s.entryProblems...)
	out = append(out, s.settingsProblems...)
	out = append(out, s.routeIdx.problems...)
	out = append(out, s.routeIdx.routeProblems(byHost)...)
	if s.sidecarIdx != nil {
		out = append(out, s.sidecarIdx.problems...)
	}
	out = append(out, s.peerIdx.problems...)
	out = append(out, s.authzIdx.problems...)
	out = append(out, s.authzIdx.authzServiceProblems(byHost)...)
	for k, why := range s.undecodable {
		out = append(out, Problem{Object: objectName(k), Reason: why})
	}
	for _, ps := range s.unsupported {
		out = append(out, ps...)
	}
	// portLevelSettings naming a port the rule's (exact) host does not have.
	for _, rule := range s.ruleIdx.all {
		svc := byHost[rule.Host]
		if svc == nil {
			continue
		}
		check := func(where string, settings []*portSettings) {
			for _, pl := range settings {
				if n := pl.GetPort().GetNumber(); n > 0 && n <= 65535 && svc.Port(int32(n)) == nil {
					out = append(out, Problem{Object: rule.object,
						Reason: where + "portLevelSettings: port " + itoa(n) + " is not a port of " + svc.Hostname + ": ignored"})
				}
			}
		}
		check("", rule.Spec.GetTrafficPolicy().GetPortLevelSettings())
		for _, sub := range rule.Spec.GetSubsets() {
			check("subset "+sub.GetName()+": ", sub.GetTrafficPolicy().GetPortLevelSettings())
		}
	}
	if len(out) == 0 {
		return nil
	}
	return sortProblems(out)
}

// configure sets the config of a service being built that the store
// derives from other objects: its DestinationRules, its namespace's mTLS
// mode, and its identities. buildService and the rule and peer indexes
// are only read.
func (s *Store) configure(svc *Service) {
	svc.rules = s.ruleIdx.forService(svc.Hostname, svc.Namespace)
	svc.mtls = s.peerIdx.namespaceMode(svc.Namespace)
	svc.deriveIdentity(s.meshCfg.TrustDomain())
}

// withConfig returns a new version of s with other rules and mTLS mode
// (and fresh memos).
func (s *Service) withConfig(rules []*DestinationRule, mtls MTLSMode) *Service {
	return &Service{
		Name: s.Name, Namespace: s.Namespace, Hostname: s.Hostname, ClusterIP: s.ClusterIP,
		Headless: s.Headless, ExternalName: s.ExternalName, Clusters: s.Clusters, Ports: s.Ports,
		Registry: s.Registry, Resolution: s.Resolution, MeshExternal: s.MeshExternal,
		Addresses: s.Addresses, ExportTo: s.ExportTo, ServiceAccounts: s.ServiceAccounts,
		sidecarPorts: s.sidecarPorts, rules: rules, mtls: mtls,
	}
}

// Built reports whether [Store.Snapshot] would return the mesh of the
// last applied record at once: it is built, and no build or apply holds
// the store.
func (s *Store) Built() bool {
	if !s.mu.TryRLock() {
		return false
	}
	defer s.mu.RUnlock()
	return s.mesh.Seq == s.applied
}
