// Package baseline is the benchmark's reference control plane: a
// go-control-plane v0.14.0 server (snapshot cache; optionally its linear
// cache for EDS) serving the same resources as pilotwire. It reads the
// same directory of Kubernetes YAML, builds the mesh with pkg/model and
// the resources with pkg/xdsgen, watches the directory with fsnotify and,
// after each change, sets a new snapshot for every node it has seen.
//
// It is used as go-control-plane's documentation suggests, with two
// choices that favour it: each type's version is a hash of its content
// (so a proxy is sent only the types that changed), and the mesh model
// and generator memoise unchanged services, as in pilotwire.
package baseline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http/pprof"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	gcplog "github.com/envoyproxy/go-control-plane/pkg/log"
	"github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/keepalive"

	"github.com/pilotwire/pilotwire/bench/internal/xdsstate"
	"github.com/pilotwire/pilotwire/bench/internal/yamldir"
	"github.com/pilotwire/pilotwire/pkg/model"
	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/pkg/xdsgen"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
	"github.com/pilotwire/pilotwire/services/ingest/filesource"
)

// EDS cache modes.
const (
	EDSSnapshot = "snapshot"
	EDSLinear   = "linear"
)

// Config of the baseline server.
type Config struct {
	// Dir is the directory of manifests to serve.
	Dir string
	// ClusterID recorded with every object (default "Kubernetes").
	ClusterID string
	// ADSAddr is the gRPC listen address.
	ADSAddr string
	// HTTPAddr serves /healthz, /readyz and /metrics; empty for none.
	HTTPAddr string
	// EDS is EDSSnapshot (load assignments in each node's snapshot) or
	// EDSLinear (one linear cache shared by every node).
	EDS string
	// Debounce is how long the directory must stay quiet after a file
	// event before it is read (default filesource.DefaultQuiet, as
	// pilotwire's ingest);
	// MaxDelay caps the wait (default 2s, as ingest).
	Debounce, MaxDelay time.Duration
	// Bare serves an ADS that answers each new subscription with an empty
	// response and nothing else: grpc-go's own cost per stream.
	Bare bool
	// Log receives the server's logs.
	Log *slog.Logger
	// Registry receives metrics (default: a new one).
	Registry *prometheus.Registry
	// OnListen, if set, is called with the bound ADS address.
	OnListen func(addr string)
}

// Server is a running baseline.
type Server struct {
	// set at construction
	cfg     Config
	log     *slog.Logger
	dir     *yamldir.Dir
	store   *model.Store
	snaps   cache.SnapshotCache
	linear  *cache.LinearCache // nil unless EDSLinear
	cache   cache.Cache
	metrics *metrics

	// guarded by mu: the current snapshots and the nodes that have them
	mu        sync.Mutex
	current   map[xdsgen.Generator]*cache.Snapshot
	nodes     map[string]xdsgen.Generator
	lastEDS   map[string]string // linear mode: load assignment name -> version
	meshCount int
}

type metrics struct {
	updates   prometheus.Counter
	nodes     prometheus.Gauge
	setTime   prometheus.Gauge
	badFiles  prometheus.Counter
	snapshots prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		updates:   prometheus.NewCounter(prometheus.CounterOpts{Name: "pilotwire_baseline_updates_total", Help: "Mesh changes applied to the caches."}),
		nodes:     prometheus.NewGauge(prometheus.GaugeOpts{Name: "pilotwire_baseline_nodes", Help: "Nodes with a snapshot."}),
		setTime:   prometheus.NewGauge(prometheus.GaugeOpts{Name: "pilotwire_baseline_last_update_seconds", Help: "Time the last update took to set every node's snapshot."}),
		badFiles:  prometheus.NewCounter(prometheus.CounterOpts{Name: "pilotwire_baseline_manifest_errors_total", Help: "Invalid manifests or objects the model rejected."}),
		snapshots: prometheus.NewCounter(prometheus.CounterOpts{Name: "pilotwire_baseline_snapshots_set_total", Help: "SetSnapshot calls."}),
	}
	reg.MustRegister(m.updates, m.nodes, m.setTime, m.badFiles, m.snapshots,
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "pilotwire_xds_marshals_total",
			Help: "Resources marshalled by pkg/xdsgen (go-control-plane marshals again for every response; that is not counted).",
		}, func() float64 { return float64(xdsgen.Marshals()) }))
	return m
}

// New builds a server; it does no I/O.
func New(cfg Config) (*Server, error) {
	if cfg.Dir == "" || cfg.ADSAddr == "" {
		return nil, errors.New("baseline: a directory and an ADS address are required")
	}
	if cfg.ClusterID == "" {
		cfg.ClusterID = "Kubernetes"
	}
	if cfg.EDS == "" {
		cfg.EDS = EDSSnapshot
	}
	if cfg.EDS != EDSSnapshot && cfg.EDS != EDSLinear {
		return nil, fmt.Errorf("baseline: EDS cache %q: want %s or %s", cfg.EDS, EDSSnapshot, EDSLinear)
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = filesource.DefaultQuiet
	}
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = 2 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	s := &Server{
		cfg:     cfg,
		log:     cfg.Log,
		dir:     yamldir.New(cfg.Dir, cfg.ClusterID),
		store:   model.NewStore(),
		metrics: newMetrics(cfg.Registry),
		current: make(map[xdsgen.Generator]*cache.Snapshot),
		nodes:   make(map[string]xdsgen.Generator),
		lastEDS: make(map[string]string),
	}
	// go-control-plane warns about expected protocol events (an ADS request
	// naming fewer resources than the snapshot holds, answered once the
	// proxy asks again); its default logger drops them, so do we unless
	// debugging.
	logger := gcplog.LoggerFuncs{
		WarnFunc: func(f string, a ...any) {
			if s.log.Enabled(context.Background(), slog.LevelDebug) {
				s.log.Debug(fmt.Sprintf(f, a...))
			}
		},
		ErrorFunc: func(f string, a ...any) { s.log.Error(fmt.Sprintf(f, a...)) },
	}
	s.snaps = cache.NewSnapshotCache(true, cache.IDHash{}, logger)
	s.cache = s.snaps
	if cfg.EDS == EDSLinear {
		s.linear = cache.NewLinearCache(xdsstate.TypeURLs[xdsstate.EDS], cache.WithLogger(logger))
		s.cache = &cache.MuxCache{
			Classify:      func(r *cache.Request) string { return classify(r.GetTypeUrl()) },
			ClassifyDelta: func(r *cache.DeltaRequest) string { return classify(r.GetTypeUrl()) },
			Caches:        map[string]cache.Cache{"eds": s.linear, "snapshot": s.snaps},
		}
	}
	return s, nil
}

func classify(typeURL string) string {
	if typeURL == xdsstate.TypeURLs[xdsstate.EDS] {
		return "eds"
	}
	return "snapshot"
}

// Run serves until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	s, err := New(cfg)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// Run reads the directory, starts serving, and follows the directory until
// ctx ends.
func (s *Server) Run(ctx context.Context) error {
	health := &svc.Health{}
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if s.cfg.HTTPAddr != "" {
		hs := svc.NewHTTPServer(s.cfg.HTTPAddr, s.cfg.Registry, health, s.log)
		// The heap profile, as pilotwire's services serve it on their debug
		// listener: the bench asks for it with ?gc=1 to force a GC before it
		// reads the Go runtime's memory metrics from outside.
		hs.Handle("/debug/pprof/heap", pprof.Handler("heap"))
		if err := hs.Listen(); err != nil {
			return err
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = hs.Serve(ctx) }()
	}

	var w *watcher
	if !s.cfg.Bare {
		var err error
		if w, err = newWatcher(s.cfg.Dir, s.cfg.Debounce, s.cfg.MaxDelay); err != nil {
			return err
		}
		defer w.close()
		recs, errs := s.dir.Scan()
		s.apply(ctx, recs, errs)
	}

	lis, err := net.Listen("tcp", s.cfg.ADSAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", s.cfg.ADSAddr, err)
	}
	gs := grpc.NewServer(
		grpc.MaxConcurrentStreams(1000000),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 15 * time.Second, PermitWithoutStream: true}),
		grpc.MaxRecvMsgSize(4<<20),
	)
	if s.cfg.Bare {
		discovery.RegisterAggregatedDiscoveryServiceServer(gs, bare{})
	} else {
		srv := server.NewServer(ctx, s.cache, server.CallbackFuncs{
			StreamRequestFunc: func(_ int64, r *discovery.DiscoveryRequest) error {
				s.ensureNode(ctx, r.GetNode())
				return nil
			},
			StreamDeltaRequestFunc: func(_ int64, r *discovery.DeltaDiscoveryRequest) error {
				s.ensureNode(ctx, r.GetNode())
				return nil
			},
		})
		discovery.RegisterAggregatedDiscoveryServiceServer(gs, srv)
	}
	serveErr := make(chan error, 1)
	wg.Add(1)
	go func() { defer wg.Done(); serveErr <- gs.Serve(lis) }()
	addr := lis.Addr().String()
	if s.cfg.OnListen != nil {
		s.cfg.OnListen(addr)
	}
	health.SetReady()
	s.log.Info("baseline ready", "ads", addr, "eds_cache", s.cfg.EDS, "bare", s.cfg.Bare)

	var events <-chan []string
	if w != nil {
		wg.Add(1)
		go func() { defer wg.Done(); w.run(ctx) }()
		events = w.batches
	}
	for {
		select {
		case <-ctx.Done():
			gs.Stop()
			return nil
		case err := <-serveErr:
			return fmt.Errorf("serve ads: %w", err)
		case files := <-events:
			recs, errs := s.dir.Reload(files)
			s.apply(ctx, recs, errs)
		}
	}
}

// apply applies records to the model and, if the mesh changed, updates
// every node.
func (s *Server) apply(ctx context.Context, recs []*pb.ChangeRecord, errs []error) {
	for _, err := range errs {
		s.metrics.badFiles.Inc()
		s.log.Warn("manifest", "err", err)
	}
	if len(recs) == 0 {
		return
	}
	bad, err := yamldir.Apply(s.store, recs)
	if err != nil || bad > 0 {
		s.metrics.badFiles.Add(float64(bad))
		s.log.Warn("model rejected objects", "bad", bad, "err", err)
	}
	start := time.Now()
	mesh := s.store.Snapshot()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.meshCount++
	changed := false
	for _, gen := range []xdsgen.Generator{xdsgen.Envoy, xdsgen.GRPC} {
		snap, err := s.build(mesh, gen)
		if err != nil {
			s.log.Error("generate", "generator", gen, "err", err)
			return
		}
		if old := s.current[gen]; old == nil || !sameVersions(old, snap) {
			s.current[gen] = snap
			changed = true
		}
	}
	if s.linear != nil {
		s.updateLinear(mesh)
	}
	if !changed {
		return
	}
	for node, gen := range s.nodes {
		if err := s.snaps.SetSnapshot(ctx, node, s.current[gen]); err != nil {
			s.log.Error("set snapshot", "node", node, "err", err)
		}
		s.metrics.snapshots.Inc()
	}
	s.metrics.updates.Inc()
	s.metrics.setTime.Set(time.Since(start).Seconds())
	s.log.Debug("mesh updated", "records", len(recs), "nodes", len(s.nodes), "took", time.Since(start))
}

// build makes the snapshot of one generator, each type versioned by its
// content. In linear mode load assignments are left out.
func (s *Server) build(mesh *model.Mesh, gen xdsgen.Generator) (*cache.Snapshot, error) {
	snap := &cache.Snapshot{}
	for t, typeURL := range xdsstate.TypeURLs {
		if t == xdsstate.EDS && s.linear != nil {
			continue
		}
		set, err := xdsgen.Generate(mesh, gen, typeURL)
		if err != nil {
			return nil, err
		}
		items := make([]types.Resource, len(set.Resources))
		for i, r := range set.Resources {
			items[i] = r.Msg
		}
		snap.Resources[cache.GetResponseType(typeURL)] = cache.NewResources(set.Version, items)
	}
	return snap, nil
}

func sameVersions(a, b *cache.Snapshot) bool {
	for i := range a.Resources {
		if a.Resources[i].Version != b.Resources[i].Version {
			return false
		}
	}
	return true
}

// updateLinear puts the load assignments whose version changed into the
// linear cache and deletes those gone. Caller holds mu.
func (s *Server) updateLinear(mesh *model.Mesh) {
	set, err := xdsgen.Generate(mesh, xdsgen.Envoy, xdsstate.TypeURLs[xdsstate.EDS])
	if err != nil {
		s.log.Error("generate eds", "err", err)
		return
	}
	update := make(map[string]types.Resource)
	seen := make(map[string]bool, len(set.Resources))
	for _, r := range set.Resources {
		seen[r.Name] = true
		if s.lastEDS[r.Name] != r.Version {
			update[r.Name] = r.Msg
			s.lastEDS[r.Name] = r.Version
		}
	}
	var del []string
	for name := range s.lastEDS {
		if !seen[name] {
			del = append(del, name)
			delete(s.lastEDS, name)
		}
	}
	if len(update) == 0 && len(del) == 0 {
		return
	}
	if err := s.linear.UpdateResources(update, del); err != nil {
		s.log.Error("update linear cache", "err", err)
	}
}

// ensureNode gives a node seen for the first time the current snapshot.
func (s *Server) ensureNode(ctx context.Context, node *core.Node) {
	id := node.GetId()
	if id == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.nodes[id]; ok {
		return
	}
	gen := xdsgen.GeneratorFor(node)
	s.nodes[id] = gen
	s.metrics.nodes.Set(float64(len(s.nodes)))
	if snap := s.current[gen]; snap != nil {
		if err := s.snaps.SetSnapshot(ctx, id, snap); err != nil {
			s.log.Error("set snapshot", "node", id, "err", err)
		}
		s.metrics.snapshots.Inc()
	}
}
