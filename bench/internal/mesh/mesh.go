// Package mesh generates the benchmark's mesh: S services with E endpoints
// each, as Kubernetes YAML (a Service and its EndpointSlice per file), and
// the changes of the benchmark trace (one endpoint changed, one service
// added, a rolling restart). Everything is derived from a seed: two meshes
// built from the same Spec and changed by the same calls in the same order
// write identical bytes.
package mesh

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Spec says what to generate.
type Spec struct {
	Services  int
	Endpoints int // per service
	Seed      uint64
	// Namespaces the services are spread over, round robin; 0 means
	// min(10, Services).
	Namespaces int
}

// String is "<services>x<endpoints>", as the harness names meshes.
func (s Spec) String() string { return fmt.Sprintf("%dx%d", s.Services, s.Endpoints) }

// Port is a Service port and the matching EndpointSlice port.
type Port struct {
	Name   string
	Port   int32 // Service port
	Target int32 // EndpointSlice (container) port
}

// Endpoint is one ready pod of a service.
type Endpoint struct {
	IP   string
	Zone string
	Pod  string
}

// Service is one generated service. Read it only; change it through Mesh.
type Service struct {
	Index     int
	Name      string
	Namespace string
	ClusterIP string
	Ports     []Port
	Endpoints []Endpoint
}

// Hostname is <name>.<namespace>.svc.cluster.local.
func (s *Service) Hostname() string { return s.Name + "." + s.Namespace + ".svc.cluster.local" }

// EndpointRef names one endpoint: service index and position.
type EndpointRef struct{ Service, Endpoint int }

// Mesh is a generated mesh and the state of its change sequence. Not safe
// for concurrent use.
type Mesh struct {
	spec     Spec
	rng      *rand.Rand
	nextIP   uint32
	services []*Service
}

// Ports every service has, and those a seeded share of services add.
var (
	httpPort  = Port{Name: "http", Port: 80, Target: 8080}
	grpcPort  = Port{Name: "grpc", Port: 9090, Target: 9090}      // HTTP/2: its own listener and route
	adminPort = Port{Name: "tcp-admin", Port: 9000, Target: 9000} // TCP: a listener per service
	zones     = []string{"zone-a", "zone-b", "zone-c"}
)

const firstPodIP = 10<<24 | 128<<16 | 1 // 10.128.0.1

// New generates a mesh.
func New(spec Spec) (*Mesh, error) {
	if spec.Services < 1 || spec.Endpoints < 1 {
		return nil, fmt.Errorf("mesh %s: need at least one service and one endpoint", spec)
	}
	if spec.Services > 60000 {
		return nil, fmt.Errorf("mesh %s: at most 60000 services", spec)
	}
	if spec.Namespaces <= 0 {
		spec.Namespaces = min(10, spec.Services)
	}
	m := &Mesh{spec: spec, rng: rand.New(rand.NewPCG(spec.Seed, spec.Seed^0x9e3779b97f4a7c15)), nextIP: firstPodIP}
	for range spec.Services {
		m.newService()
	}
	return m, nil
}

// Spec returns the spec the mesh was generated from (namespaces defaulted).
func (m *Mesh) Spec() Spec { return m.spec }

// Services returns the services in index order. Read-only.
func (m *Mesh) Services() []*Service { return m.services }

// EndpointCount is the number of endpoints of every service together.
func (m *Mesh) EndpointCount() int {
	n := 0
	for _, s := range m.services {
		n += len(s.Endpoints)
	}
	return n
}

func (m *Mesh) newService() *Service {
	i := len(m.services)
	s := &Service{
		Index:     i,
		Name:      fmt.Sprintf("svc-%05d", i),
		Namespace: fmt.Sprintf("ns-%02d", i%m.spec.Namespaces),
		ClusterIP: fmt.Sprintf("10.%d.%d.%d", 96+i/62500, (i/250)%250, i%250+1),
		Ports:     []Port{httpPort},
	}
	if m.rng.IntN(4) == 0 {
		s.Ports = append(s.Ports, grpcPort)
	}
	if m.rng.IntN(10) == 0 {
		s.Ports = append(s.Ports, adminPort)
	}
	for range m.spec.Endpoints {
		s.Endpoints = append(s.Endpoints, m.newPod(s, zones[m.rng.IntN(len(zones))]))
	}
	m.services = append(m.services, s)
	return s
}

// newPod returns a new pod of s: a fresh IP and name.
func (m *Mesh) newPod(s *Service, zone string) Endpoint {
	for m.nextIP&0xff == 0 || m.nextIP&0xff == 0xff {
		m.nextIP++
	}
	ip := m.nextIP
	m.nextIP++
	const letters = "bcdfghjklmnpqrstvwxz2456789"
	suffix := make([]byte, 5)
	for i := range suffix {
		suffix[i] = letters[m.rng.IntN(len(letters))]
	}
	return Endpoint{
		IP:   fmt.Sprintf("%d.%d.%d.%d", ip>>24, ip>>16&0xff, ip>>8&0xff, ip&0xff),
		Zone: zone,
		Pod:  s.Name + "-" + string(suffix),
	}
}

// ChangeEndpoint replaces one endpoint of one service (chosen by the seed)
// with a new pod in the same zone, and returns the service.
func (m *Mesh) ChangeEndpoint() *Service {
	s := m.services[m.rng.IntN(len(m.services))]
	j := m.rng.IntN(len(s.Endpoints))
	s.Endpoints[j] = m.newPod(s, s.Endpoints[j].Zone)
	return s
}

// AddService adds a service with the spec's number of endpoints and
// returns it.
func (m *Mesh) AddService() *Service { return m.newService() }

// RestartPlan splits a rolling restart of total endpoints (at most every
// endpoint) into steps batches of near-equal size, earlier batches taking
// the remainder. Endpoints are taken service by service, services in an
// order drawn from the seed, so a restart replaces whole deployments as
// Kubernetes does.
func (m *Mesh) RestartPlan(total, steps int) [][]EndpointRef {
	total = min(total, m.EndpointCount())
	if total <= 0 || steps <= 0 {
		return nil
	}
	steps = min(steps, total)
	refs := make([]EndpointRef, 0, total)
	for _, si := range m.rng.Perm(len(m.services)) {
		for j := range m.services[si].Endpoints {
			if len(refs) == total {
				break
			}
			refs = append(refs, EndpointRef{Service: si, Endpoint: j})
		}
	}
	plan := make([][]EndpointRef, steps)
	size, extra := total/steps, total%steps
	for i := range plan {
		n := size
		if i < extra {
			n++
		}
		plan[i], refs = refs[:n], refs[n:]
	}
	return plan
}

// Restart replaces the endpoints named by refs with new pods and returns
// the services changed, in index order.
func (m *Mesh) Restart(refs []EndpointRef) []*Service {
	var changed []*Service
	for _, r := range refs {
		s := m.services[r.Service]
		s.Endpoints[r.Endpoint] = m.newPod(s, s.Endpoints[r.Endpoint].Zone)
		if !slices.Contains(changed, s) {
			changed = append(changed, s)
		}
	}
	slices.SortFunc(changed, func(a, b *Service) int { return a.Index - b.Index })
	return changed
}

// FileName is the manifest file of a service, relative to the mesh
// directory.
func FileName(s *Service) string { return s.Name + ".yaml" }

// Render returns the manifest file of a service: its Service and its
// EndpointSlice.
func Render(s *Service) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\nmetadata:\n  name: %s\n  namespace: %s\n  labels: {app: %s}\nspec:\n  clusterIP: %s\n  selector: {app: %s}\n  ports:\n",
		s.Name, s.Namespace, s.Name, s.ClusterIP, s.Name)
	for _, p := range s.Ports {
		fmt.Fprintf(&b, "  - {name: %s, port: %d, targetPort: %d, protocol: TCP}\n", p.Name, p.Port, p.Target)
	}
	fmt.Fprintf(&b, "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: %s-0\n  namespace: %s\n  labels: {kubernetes.io/service-name: %s}\naddressType: IPv4\nports:\n",
		s.Name, s.Namespace, s.Name)
	for _, p := range s.Ports {
		fmt.Fprintf(&b, "- {name: %s, port: %d, protocol: TCP}\n", p.Name, p.Target)
	}
	b.WriteString("endpoints:\n")
	for _, e := range s.Endpoints {
		fmt.Fprintf(&b, "- addresses: [%q]\n  conditions: {ready: true}\n  zone: %s\n  targetRef: {kind: Pod, name: %s, namespace: %s}\n",
			e.IP, e.Zone, e.Pod, s.Namespace)
	}
	return b.Bytes()
}

// WriteAll writes every service's file into dir, which must exist.
func (m *Mesh) WriteAll(dir string) error {
	for _, s := range m.services {
		if _, err := WriteFile(dir, FileName(s), Render(s)); err != nil {
			return err
		}
	}
	return nil
}

// Write writes the files of services into dir and returns the time the
// last one became visible: the injection time of the change.
func Write(dir string, services ...*Service) (time.Time, error) {
	if len(services) == 0 {
		return time.Time{}, errors.New("mesh: nothing to write")
	}
	var at time.Time
	for _, s := range services {
		t, err := WriteFile(dir, FileName(s), Render(s))
		if err != nil {
			return time.Time{}, err
		}
		at = t
	}
	return at, nil
}

// WriteFile replaces dir/name atomically, as editors and ConfigMap volumes
// do: the content goes to a hidden temporary file that is then renamed. It
// returns the time just before the rename, when watchers may first see the
// new content.
func WriteFile(dir, name string, data []byte) (time.Time, error) {
	tmp := filepath.Join(dir, "."+name+".tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return time.Time{}, fmt.Errorf("write %s: %w", tmp, err)
	}
	at := time.Now()
	if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
		return time.Time{}, fmt.Errorf("rename %s: %w", tmp, err)
	}
	return at, nil
}
