package kubesource

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

// Defaults.
const (
	// DefaultSyncTimeout is how long readiness waits for a cluster to sync
	// (Istio's PILOT_REMOTE_CLUSTER_TIMEOUT).
	DefaultSyncTimeout = 30 * time.Second
	// DefaultSecretNamespace holds the multicluster Secrets (istiod's
	// namespace).
	DefaultSecretNamespace = "istio-system"
	// MultiClusterSecretLabel marks a Secret whose data keys are cluster
	// ids and whose values are kubeconfigs, as Istio's remote secrets are.
	MultiClusterSecretLabel = "istio/multiCluster"
)

// Sink receives one cluster's objects; *publish.Publisher is one. A sink
// owns its cluster id's subjects.
type Sink interface {
	// StartRetrying reads what the stream holds for the cluster, retrying
	// (each failure logged and counted, then passed to onFailure if set)
	// until it succeeds or ctx ends.
	StartRetrying(ctx context.Context, onFailure func(err error, wait time.Duration)) error
	// Sync makes the stream hold exactly desired.
	Sync(ctx context.Context, desired []publish.Object) (publish.Result, error)
	// Apply publishes individual changes.
	Apply(ctx context.Context, changes ...publish.Change) (publish.Result, error)
	// Live lists the objects the stream holds for the cluster.
	Live() []publish.LiveObject
}

var _ Sink = (*publish.Publisher)(nil)

// Origins of static clusters.
const (
	OriginFlag      = "flag"
	OriginInCluster = "in-cluster"
	originSecret    = "secret"
)

// ClusterConfig is a cluster named at start.
type ClusterConfig struct {
	// ID is the cluster id every record of the cluster carries.
	ID string
	// Config reaches the cluster's API server.
	Config *rest.Config
	// Origin is OriginFlag (default) or OriginInCluster.
	Origin string
}

// Options configure a Source. Zero values mean the defaults noted.
type Options struct {
	// Clusters are watched from start to end, config kinds included.
	Clusters []ClusterConfig
	// ConfigCluster is the id, among Clusters, of the cluster whose
	// multicluster Secrets add clusters; "" watches no Secrets.
	ConfigCluster string
	// SecretNamespace is where those Secrets live (default istio-system).
	SecretNamespace string
	// EnableGatewayAPI adds the Gateway API kinds to the config kinds.
	EnableGatewayAPI bool
	// SyncTimeout bounds how long readiness waits for one cluster
	// (default 30s).
	SyncTimeout time.Duration
	// ResyncPeriod makes informers replay their stores (default 0: never).
	// A resync publishes nothing; it exists for tests and paranoia.
	ResyncPeriod time.Duration
	// ReservedIDs are cluster ids other sources own (the file source's): a
	// Secret cannot claim them.
	ReservedIDs []string
	// ClientQPS and ClientBurst limit the clients of clusters from Secrets
	// (defaults 50 and 100); static clusters keep their config's limits.
	ClientQPS   float32
	ClientBurst int
	// Publish is the template of every cluster's publisher options; the
	// cluster id, logger and registerer (with a cluster label) are set per
	// cluster.
	Publish publish.Options
	// Log receives the source's logs (default: discarded).
	Log *slog.Logger
	// Registerer receives the source's metrics (default: none).
	Registerer prometheus.Registerer
}

func (o Options) withDefaults() Options {
	if o.SecretNamespace == "" {
		o.SecretNamespace = DefaultSecretNamespace
	}
	if o.SyncTimeout <= 0 {
		o.SyncTimeout = DefaultSyncTimeout
	}
	if o.ClientQPS <= 0 {
		o.ClientQPS = 50
	}
	if o.ClientBurst <= 0 {
		o.ClientBurst = 100
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// Source watches Kubernetes clusters and feeds one publisher per cluster.
type Source struct {
	// set at construction
	js      jetstream.JetStream
	opts    Options
	log     *slog.Logger
	metrics *metrics
	wg      sync.WaitGroup // cluster goroutines

	// guarded by mu
	mu       sync.Mutex
	clusters map[string]*running
}

// running is one cluster's goroutine.
type running struct {
	c      *cluster
	kind   string // origin kind: flag, in-cluster, secret
	cancel context.CancelFunc
	done   chan struct{}
}

// errDuplicateCluster reports a cluster id already in use.
var errDuplicateCluster = errors.New("cluster id already in use")

// New returns a source; it does no I/O (see Run).
func New(js jetstream.JetStream, o Options) (*Source, error) {
	o = o.withDefaults()
	seen := make(map[string]bool)
	for _, id := range o.ReservedIDs {
		seen[id] = true
	}
	var errs []error
	for _, c := range o.Clusters {
		switch {
		case c.ID == "":
			errs = append(errs, errors.New("a cluster has no id"))
		case seen[c.ID]:
			errs = append(errs, fmt.Errorf("cluster id %q is used twice", c.ID))
		case c.Config == nil:
			errs = append(errs, fmt.Errorf("cluster %q has no config", c.ID))
		}
		seen[c.ID] = true
	}
	if o.ConfigCluster != "" && !slices.ContainsFunc(o.Clusters, func(c ClusterConfig) bool { return c.ID == o.ConfigCluster }) {
		errs = append(errs, fmt.Errorf("config cluster %q is not among the clusters", o.ConfigCluster))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("kubernetes source: %w", err)
	}
	return &Source{
		js:       js,
		opts:     o,
		log:      o.Log,
		metrics:  newMetrics(o.Registerer),
		clusters: make(map[string]*running),
	}, nil
}

// Run watches the clusters until ctx ends. ready is called once every
// static cluster, and every cluster the multicluster Secrets name at start,
// has synced or passed its sync timeout; it gets their status. Run returns
// nil when ctx ends.
func (s *Source) Run(ctx context.Context, ready func([]ClusterStatus)) error {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		s.wg.Wait()
	}()
	for _, cc := range s.opts.Clusters {
		origin := cmp.Or(cc.Origin, OriginFlag)
		if err := s.addCluster(ctx, cc.ID, origin, origin, cc.Config, true); err != nil {
			return err
		}
	}
	secretsSettled := make(chan struct{})
	if s.opts.ConfigCluster != "" {
		var cfg *rest.Config
		for _, cc := range s.opts.Clusters {
			if cc.ID == s.opts.ConfigCluster {
				cfg = cc.Config
			}
		}
		sc := newSecretController(s, s.opts.ConfigCluster, cfg, secretsSettled)
		wg.Go(func() { sc.run(ctx) })
	} else {
		close(secretsSettled)
	}

	select {
	case <-secretsSettled:
	case <-ctx.Done():
		return nil
	}
	s.mu.Lock()
	waitFor := make([]*cluster, 0, len(s.clusters))
	for _, r := range s.clusters {
		waitFor = append(waitFor, r.c)
	}
	s.mu.Unlock()
	for _, c := range waitFor {
		select {
		case <-c.settled:
		case <-ctx.Done():
			return nil
		}
	}
	if ready != nil {
		ready(s.Status())
	}
	<-ctx.Done()
	return nil
}

// addCluster starts watching a cluster. kind is the origin's kind (a metric
// label); config says whether config kinds are watched too.
func (s *Source) addCluster(ctx context.Context, id, origin, kind string, cfg *rest.Config, config bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.clusters[id]; ok || slices.Contains(s.opts.ReservedIDs, id) {
		return fmt.Errorf("cluster %q: %w", id, errDuplicateCluster)
	}
	po := s.opts.Publish
	po.Cluster = id
	po.Log = s.log
	if s.opts.Registerer != nil {
		po.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"cluster": id}, s.opts.Registerer)
	}
	pub, err := publish.New(s.js, po)
	if err != nil {
		return fmt.Errorf("cluster %q: %w", id, err)
	}
	c := newCluster(s, id, origin, cfg, config, pub)
	cctx, cancel := context.WithCancel(ctx)
	r := &running{c: c, kind: kind, cancel: cancel, done: make(chan struct{})}
	s.clusters[id] = r
	s.metrics.clusters.WithLabelValues(kind).Inc()
	s.metrics.synced.WithLabelValues(id).Set(0)
	c.log.Info("watching cluster", "origin", origin, "host", cfg.Host, "config_kinds", config)
	s.wg.Go(func() {
		defer close(r.done)
		c.run(cctx)
	})
	return nil
}

// removeCluster stops watching a cluster and waits for its goroutines. With
// purge, every object the cluster has on the stream gets a delete record:
// the cluster left the mesh, and so do its endpoints.
func (s *Source) removeCluster(ctx context.Context, id string, purge bool) {
	s.mu.Lock()
	r := s.clusters[id]
	delete(s.clusters, id)
	s.mu.Unlock()
	if r == nil {
		return
	}
	r.cancel()
	<-r.done
	s.metrics.clusters.WithLabelValues(r.kind).Dec()
	s.metrics.forget(id)
	if !purge {
		r.c.log.Info("stopped watching cluster")
		return
	}
	if err := r.c.sink.StartRetrying(ctx, nil); err != nil {
		return // ctx ended
	}
	res, err := r.c.sink.Sync(ctx, nil)
	if err != nil {
		return
	}
	r.c.log.Info("cluster removed; its objects are deleted from the stream", "deleted", res.Published+res.Deduplicated)
}

// Status describes every running cluster, sorted by id.
func (s *Source) Status() []ClusterStatus {
	s.mu.Lock()
	cs := make([]*cluster, 0, len(s.clusters))
	for _, r := range s.clusters {
		cs = append(cs, r.c)
	}
	s.mu.Unlock()
	out := make([]ClusterStatus, 0, len(cs))
	for _, c := range cs {
		out = append(out, c.status())
	}
	slices.SortFunc(out, func(a, b ClusterStatus) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// ServeHTTP serves Status as JSON (ingest mounts it on /debug/clusterz).
func (s *Source) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(s.Status())
}
