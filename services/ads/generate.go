package ads

import (
	"log/slog"
	"sync"
	"sync/atomic"

	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/pilotwire/pilotwire/pkg/model"
	"github.com/pilotwire/pilotwire/pkg/xdsgen"
)

// response is what one watch is sent: resources shared by every connection
// (marshalled once per resource version), and the response's version.
type response struct {
	version   string
	resources []*anypb.Any
	names     []string
	versions  []string // per resource, parallel to names
	bytes     int
	// id names a shared response (selectResponse); 0 for one made for a
	// single connection (empty, or narrowed)
	id uint64
	// narrowed: this response narrowed against older ones (narrow.go)
	narrowed atomic.Pointer[[]narrowing]
	// shared: many connections may be sent this response (a selected
	// one, or a narrowing of one), so its encoded resources are kept in
	// encoded (encoded.go) and its encoded names in encodedNames
	shared  bool
	encoded atomic.Pointer[encoded]
	// encodedNames: the names as a delivery record's (record.go)
	encodedNames atomic.Pointer[encoded]
}

// onlyChanged narrows r to the resources whose version differs from sent
// (name -> version last sent). It reports false when none differs.
func (r *response) onlyChanged(sent map[string]string) (*response, bool) {
	out := &response{version: r.version}
	for i, n := range r.names {
		if sent[n] == r.versions[i] {
			continue
		}
		out.resources = append(out.resources, r.resources[i])
		out.names = append(out.names, n)
		out.versions = append(out.versions, r.versions[i])
		out.bytes += len(r.resources[i].GetValue())
	}
	return out, len(out.names) > 0
}

// versionsByName maps r's resource names to their versions (nil for a
// nil r).
func (r *response) versionsByName() map[string]string {
	if r == nil {
		return nil
	}
	m := make(map[string]string, len(r.names))
	for i, n := range r.names {
		m[n] = r.versions[i]
	}
	return m
}

// changedSince lists the resources of r that are new or changed since
// prev (all of them when prev is nil).
func (r *response) changedSince(prev *response) []string {
	if prev == r {
		return nil
	}
	sent := prev.versionsByName()
	var out []string
	for i, n := range r.names {
		if v, ok := sent[n]; !ok || v != r.versions[i] {
			out = append(out, n)
		}
	}
	return out
}

// incrementalSotW reports whether a state-of-the-world response of the type
// may carry only changed resources: for EDS and RDS, resources missing from
// a response are kept by the client (xDS protocol); CDS and LDS responses
// must carry the whole set.
func incrementalSotW(typeURL string) bool {
	return typeURL == resource.EndpointType || typeURL == resource.RouteType
}

// emptyVersion is the version of a response with no resources.
var emptyVersion = xdsgen.VersionOf(nil)

// build generates the response for one watch from the mesh. Proxies that
// watch the same names of the same generated set share one response: a
// push to a thousand alike sidecars selects and hashes once, not a thousand
// times. Responses are read-only.
func (s *Server) build(m *model.Mesh, p *proxy, w *watch) (*response, error) {
	if !w.wildcard && len(w.names) == 0 {
		return &response{version: emptyVersion}, nil
	}
	set, err := s.generate(m, p, w.typeURL)
	if err != nil {
		return nil, err
	}
	key := respKey{set: set, wildcard: w.wildcard, names: w.namesKey()}
	if r := s.responses.get(key); r != nil {
		return r, nil
	}
	r := selectResponse(set, w)
	s.responses.put(key, r)
	return r, nil
}

// selectResponse builds the response of a watch from a generated set.
func selectResponse(set *xdsgen.Set, w *watch) *response {
	var rs []*xdsgen.Resource
	var version string
	if w.wildcard {
		rs, version = set.Resources, set.Version
	} else {
		rs, version = set.Select(w.names)
	}
	r := &response{version: version, resources: make([]*anypb.Any, len(rs)), names: make([]string, len(rs)), versions: make([]string, len(rs)), id: responseIDs.Add(1), shared: true}
	for i, x := range rs {
		r.resources[i] = x.Any
		r.names[i] = x.Name
		r.versions[i] = x.Version
		r.bytes += len(x.Any.GetValue())
	}
	return r
}

// respKey names a shared response: the generated set (immutable, so its
// pointer names its content) and the watch's names.
type respKey struct {
	set      *xdsgen.Set
	wildcard bool
	names    string
}

// responseCache holds shared responses. It is cleared whole when it grows
// past its bound: entries of older sets are then dropped with the rest.
type responseCache struct {
	mu sync.Mutex
	m  map[respKey]*response
}

const responseCacheSize = 4096

func (c *responseCache) get(k respKey) *response {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[k]
}

func (c *responseCache) put(k respKey, r *response) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= responseCacheSize {
		c.m = make(map[respKey]*response)
	}
	c.m[k] = r
}

// generate returns the set of typeURL generated for proxy p: what it reads
// of the proxy (type, pod IP, namespace) and the mesh config.
func (s *Server) generate(m *model.Mesh, p *proxy, typeURL string) (*xdsgen.Set, error) {
	return xdsgen.GenerateFor(m, p.XDS(s.meshConfig), typeURL)
}

// noteProxy logs and counts router (gateway) connections: they get the
// outbound clusters and the listeners and routes of the Istio Gateways
// selecting their workload (found by its labels: those of the endpoints
// with the router's IP).
func (s *Server) noteProxy(p *proxy, log *slog.Logger) {
	if p.Type == ProxyRouter {
		s.metrics.routers.Inc()
		log.Info("router (gateway) connected: serving the Istio Gateways that select its workload", "node", p.ID, "ip", p.IP)
	}
}

// generateFailed logs and counts a generation error; the connection keeps
// what it has and gets the next change as usual.
func (c *conn) generateFailed(w *watch, m *model.Mesh, err error) {
	c.s.metrics.generateErrors.WithLabelValues(shortType(w.typeURL)).Inc()
	c.log.Error("generate", "type", shortType(w.typeURL), "seq", m.Seq, "err", err)
}
