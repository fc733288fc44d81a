package faults

import (
	"strings"
	"time"

	"github.com/pilotwire/pilotwire/bench/internal/mesh"
)

// churn writes the changes and remembers, per EndpointSlice, every
// version written, so that the change stream can be compared with the
// source.
type churn struct {
	// set at construction
	dir   string
	m     *mesh.Mesh
	every int // every this many changes adds a service (a full push); the others move one endpoint

	// owned by the caller's goroutine
	n        int                   // changes written
	versions map[string][]*written // EndpointSlice name -> versions in write order
	services map[string]int        // Service name -> the phase that wrote it (-1: the initial mesh)
	order    []string              // slice names in creation order
}

// written is one version of one EndpointSlice on disk.
type written struct {
	content string // the endpoints' addresses, in order
	phase   int    // -1: the initial mesh
	at      time.Time
	next    time.Time // when the next version replaced it; zero while current
}

func newChurn(dir string, spec mesh.Spec, every int) (*churn, error) {
	m, err := mesh.New(spec)
	if err != nil {
		return nil, err
	}
	c := &churn{dir: dir, m: m, every: every, versions: make(map[string][]*written), services: make(map[string]int)}
	if err := m.WriteAll(dir); err != nil {
		return nil, err
	}
	now := time.Now()
	for _, s := range m.Services() {
		c.record(s, -1, now)
		c.services[s.Name] = -1
	}
	return c, nil
}

func sliceName(s *mesh.Service) string { return s.Name + "-0" }

func sliceContent(s *mesh.Service) string {
	ips := make([]string, len(s.Endpoints))
	for i, e := range s.Endpoints {
		ips[i] = e.IP
	}
	return strings.Join(ips, ",")
}

func (c *churn) record(s *mesh.Service, phase int, at time.Time) {
	name := sliceName(s)
	vs := c.versions[name]
	if len(vs) == 0 {
		c.order = append(c.order, name)
	} else {
		vs[len(vs)-1].next = at
	}
	c.versions[name] = append(vs, &written{content: sliceContent(s), phase: phase, at: at})
}

// step writes the next change. Endpoint moves go round robin over the
// services, so a file is rewritten only every len(services) changes and
// the file source never has a reason to coalesce two versions.
func (c *churn) step(phase int) error {
	c.n++
	var s *mesh.Service
	if c.every > 0 && c.n%c.every == 0 {
		s = c.m.AddService()
		c.services[s.Name] = phase
	} else {
		svcs := c.m.Services()
		i := c.n % len(svcs)
		j := (c.n / len(svcs)) % len(svcs[i].Endpoints)
		s = c.m.Restart([]mesh.EndpointRef{{Service: i, Endpoint: j}})[0]
	}
	at, err := mesh.Write(c.dir, s)
	if err != nil {
		return err
	}
	c.record(s, phase, at)
	return nil
}
