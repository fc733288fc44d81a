package model

import (
	"maps"
	"slices"
	"strings"
)

// Snapshot returns an immutable view of the mesh at [Store.AppliedSeq]. It
// returns the same *Mesh until the next Apply; after one, it rebuilds only the
// services the applied records touched, and keeps the *Service of every other
// service (and of any touched service whose content did not change).
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

// rebuild derives the next mesh from the previous one and the dirty
// services. Callers hold mu.
func (s *Store) rebuild() *Mesh {
	prev := s.mesh
	var byHost map[string]*Service // copied on first change
	reorder := false               // a service came or went
	configChanged := false         // something other than endpoints changed
	for sk := range s.dirty {
		host := Hostname(sk.Namespace, sk.Name)
		old := prev.content.byHost[host]
		next := buildService(sk, s.services[sk], s.slices[sk])
		sameConfig := next != nil && old != nil && old.sameConfig(next)
		switch {
		case next == nil && old == nil:
			continue
		case sameConfig && old.sameEndpoints(next):
			continue
		}
		if byHost == nil {
			byHost = maps.Clone(prev.content.byHost)
		}
		switch {
		case next == nil:
			delete(byHost, host)
			reorder = true
		case old == nil:
			next.config = new(memo)
			byHost[host] = next
			reorder = true
		case sameConfig:
			next.config = old.config
			byHost[host] = next
		default:
			next.config = new(memo)
			byHost[host] = next
			configChanged = true
		}
	}
	clear(s.dirty)
	if byHost == nil {
		return prev.withSeq(s.applied)
	}
	var services []*Service
	if reorder {
		services = slices.SortedFunc(maps.Values(byHost), func(a, b *Service) int {
			return strings.Compare(a.Hostname, b.Hostname)
		})
	} else {
		services = make([]*Service, len(prev.Services))
		for i, old := range prev.Services {
			services[i] = byHost[old.Hostname]
		}
	}
	config := prev.content.config
	if reorder || configChanged {
		config = new(memo)
	}
	return &Mesh{Seq: s.applied, Services: services, content: &meshContent{byHost: byHost, config: config}}
}
