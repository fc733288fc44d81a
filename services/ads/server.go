package ads

import (
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// Server is one ADS frontend's gRPC service.
type Server struct {
	discovery.UnimplementedAggregatedDiscoveryServiceServer

	// set at construction
	id        string
	store     *model.Store // the model, for the debug endpoints
	meshes    meshSource   // the model, for connections (the store)
	log       *slog.Logger
	metrics   *metrics
	orders    *orderRouter
	reports   pushReporter // told of each push order done (orders)
	registry  *registry
	recorder  *recorder
	drainCh   chan struct{}
	drainOnce sync.Once
	connSeq   atomic.Uint64
	// incarnation tells this process's connection ids from those of an
	// earlier process with the same frontend id ("" in tests: ids stay
	// <frontend>-<n>)
	incarnation string
	admission   *admission     // nil: every stream admitted at once (admission.go)
	limits      streamLimits   // what one stream may do
	identity    *identityCheck // nil: no TLS identity check
	responses   responseCache  // shared by connections with alike watches
	sds         *sdsServer     // nil: no Kubernetes client, secrets not served (sds.go)

	// set at construction; nil is Istio's defaults
	meshConfig *meshconfig.MeshConfig

	// debug requests over xDS (debugads.go); set at construction
	debugAuthOff bool      // answer callers without a verified identity
	debugSlot    debugGate // one debug answer built at a time
	// made once, on first use
	debugMuxOnce   sync.Once
	debugEndpoints *http.ServeMux
	cpOnce         sync.Once
	cp             *core.ControlPlane

	// guarded by mu
	mu    sync.RWMutex
	conns map[string]*conn
}

var _ discovery.AggregatedDiscoveryServiceServer = (*Server)(nil)

// StreamAggregatedResources serves one state-of-the-world ADS stream.
func (s *Server) StreamAggregatedResources(stream grpcSotW) error {
	return s.serveSotW(stream, "")
}

// DeltaAggregatedResources serves one incremental (delta) ADS stream.
func (s *Server) DeltaAggregatedResources(stream grpcDelta) error {
	return s.serveDelta(stream, "")
}

func (s *Server) serveSotW(stream grpcSotW, fixedType string) error {
	release, err := s.admission.admit(stream.Context(), s.drainCh)
	if err != nil {
		return err
	}
	defer release()
	c := s.newConn(stream.Context(), fixedType)
	c.admitted = release
	c.sotw = stream
	return c.run()
}

func (s *Server) serveDelta(stream grpcDelta, fixedType string) error {
	release, err := s.admission.admit(stream.Context(), s.drainCh)
	if err != nil {
		return err
	}
	defer release()
	c := s.newConn(stream.Context(), fixedType)
	c.admitted = release
	c.delta = stream
	return c.run()
}

func (s *Server) nextConnID() string {
	n := strconv.FormatUint(s.connSeq.Add(1), 10)
	if s.incarnation == "" {
		return s.id + "-" + n
	}
	return s.id + "-" + s.incarnation + "-" + n
}

// addConn makes the connection reachable by push orders. Its registry entry
// is written after its first answer (updateConn), with what it watches.
func (s *Server) addConn(c *conn) {
	c.published.Store(c.info())
	c.subsChanged = true
	s.mu.Lock()
	s.conns[c.id] = c
	s.mu.Unlock()
}

func (s *Server) removeConn(c *conn) {
	s.mu.Lock()
	delete(s.conns, c.id)
	s.mu.Unlock()
	s.registry.remove(c.id)
}

// updateConn refreshes the connection's view for the debug endpoints and,
// when its subscriptions changed (what the pusher scopes pushes by), its
// registry entry. ACKs and sends alone do not touch the registry: the pusher
// learns synced sequences from PushDone reports. Called by the conn's loop.
func (s *Server) updateConn(c *conn) {
	ci := c.info()
	c.published.Store(ci)
	if c.subsChanged {
		c.subsChanged = false
		s.registry.put(ci)
	}
}

func (s *Server) lookupConn(id string) *conn {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.conns[id]
}

func (s *Server) connCount() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.conns)
}

// drain makes every stream end with Unavailable so clients reconnect to
// another frontend.
func (s *Server) drain() {
	s.drainOnce.Do(func() { close(s.drainCh) })
}
