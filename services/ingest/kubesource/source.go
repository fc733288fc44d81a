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

	"github.com/pilotwire/pilotwire/pkg/lease"
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
	// SyncKeeping makes the stream hold exactly desired, but for the
	// objects keep reports (kinds the source cannot list), left as they are.
	SyncKeeping(ctx context.Context, desired []publish.Object, keep func(publish.Key) bool) (publish.Result, error)
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
	// EnableGatewayAPI adds the Gateway API kinds to the config kinds and
	// runs the Gateway API status writer (gwstatus.go) of each config
	// cluster while this instance holds the cluster's lease.
	EnableGatewayAPI bool
	// GatewayStatusDebounce is how long the status writer gathers changes
	// before it writes (default DefaultGatewayStatusDebounce, 1s); negative
	// turns the writer off.
	GatewayStatusDebounce time.Duration
	// DomainSuffix is the mesh domain suffix of Service hostnames in the
	// Gateway API conversion (default cluster.local).
	DomainSuffix string
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
	// ClientCompression lets the clients that list and watch a cluster
	// ask its API server for gzip (unless the cluster's kubeconfig sets
	// disable-compression). Off by default, as for Kubernetes' own
	// control-plane components: a list of a whole kind, compressed by
	// the API server and inflated by ingest, costs both more CPU than it
	// saves on a local network (measured in docs/benchmarks.md, issue 17).
	// Turn it on for clusters behind slow links.
	ClientCompression bool
	// Publish is the template of every cluster's publisher options; the
	// cluster id, logger, registerer (with a cluster label) and Reread
	// are set per cluster.
	Publish publish.Options
	// Lease, with a bucket, makes each cluster id's writer one instance at
	// a time: a cluster is watched and published only while this instance
	// holds its lease (publish.LeaseKey); the others stand by (and count
	// as settled for readiness, so that a rolling update can proceed).
	Lease publish.LeaseOptions
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

// running is one cluster's goroutine. It runs terms: a term watches and
// publishes the cluster while this instance holds its lease (with no
// lease, one term lasts as long as the cluster).
type running struct {
	// set at construction
	id, origin string
	kind       string // origin kind: flag, in-cluster, secret
	cfg        *rest.Config
	config     bool // watch config kinds too
	cancel     context.CancelFunc
	done       chan struct{} // closed when the goroutine has ended
	settled    chan struct{} // closed once synced, timed out, or standing by
	settle     sync.Once

	// guarded by Source.mu
	c      *cluster // the current term's; nil before the first and while standing by
	holder string   // the instance writing the cluster, while standing by
}

func (r *running) markSettled() { r.settle.Do(func() { close(r.settled) }) }

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
	waitFor := make([]*running, 0, len(s.clusters))
	for _, r := range s.clusters {
		waitFor = append(waitFor, r)
	}
	s.mu.Unlock()
	for _, r := range waitFor {
		select {
		case <-r.settled:
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
	cctx, cancel := context.WithCancel(ctx)
	r := &running{id: id, origin: origin, kind: kind, cfg: cfg, config: config, cancel: cancel,
		done: make(chan struct{}), settled: make(chan struct{})}
	s.clusters[id] = r
	s.metrics.clusters.WithLabelValues(kind).Inc()
	s.metrics.synced.WithLabelValues(id).Set(0)
	s.log.Info("watching cluster", "cluster", id, "origin", origin, "host", cfg.Host, "config_kinds", config)
	s.wg.Go(func() {
		defer close(r.done)
		s.runCluster(cctx, r)
	})
	return nil
}

// clusterRegisterer labels metrics with the cluster id.
func (s *Source) clusterRegisterer(id string) prometheus.Registerer {
	if s.opts.Registerer == nil {
		return nil
	}
	return prometheus.WrapRegistererWith(prometheus.Labels{"cluster": id}, s.opts.Registerer)
}

// newPublisher returns a publisher of cluster id.
func (s *Source) newPublisher(id string, reread func(publish.Key) (publish.Change, bool)) *publish.Publisher {
	po := s.opts.Publish
	po.Cluster = id
	po.Log = s.log
	po.Registerer = s.clusterRegisterer(id)
	po.Reread = reread
	pub, err := publish.New(s.js, po)
	if err != nil {
		panic(err) // only without a cluster id, which addCluster refuses
	}
	return pub
}

// runCluster runs r's terms until ctx ends: one, or one each time this
// instance wins the cluster's writer lease.
func (s *Source) runCluster(ctx context.Context, r *running) {
	term := func(ctx context.Context) error {
		c := newCluster(s, r)
		c.sink = s.newPublisher(r.id, c.current)
		s.mu.Lock()
		r.c, r.holder = c, ""
		s.mu.Unlock()
		if r.config && s.opts.EnableGatewayAPI && s.opts.GatewayStatusDebounce >= 0 {
			ctx, cancel := context.WithCancel(ctx)
			var wg sync.WaitGroup
			wg.Go(func() { s.runGatewayStatus(ctx, c) })
			defer wg.Wait()
			defer cancel()
		}
		c.run(ctx)
		return nil
	}
	el := s.opts.Lease.Elector(r.id, s.log, s.clusterRegisterer(r.id), func(holder string) {
		s.mu.Lock()
		changed := r.holder != holder
		r.c, r.holder = nil, holder
		s.mu.Unlock()
		s.metrics.synced.WithLabelValues(r.id).Set(0)
		if changed {
			s.log.Info("another instance writes the cluster; standing by", "cluster", r.id, "holder", holder)
		}
		r.markSettled()
	})
	if el == nil {
		_ = term(ctx)
		return
	}
	_ = el.Run(ctx, term) // term returns nil: Run ends with ctx
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
		s.log.Info("stopped watching cluster", "cluster", id)
		return
	}
	s.purge(ctx, id, "cluster removed")
}

// purge publishes a delete for every object cluster id has on the stream,
// as the cluster's writer: with a lease, once this instance holds it
// (waiting at most two lease TTLs: an instance that holds it longer is
// active and sees the same removal). The deletes are subject to the
// publisher's mass-delete guard.
func (s *Source) purge(ctx context.Context, id, why string) {
	pub := s.newPublisher(id, nil)
	work := func(ctx context.Context) error {
		if err := pub.StartRetrying(ctx, nil); err != nil {
			return err // ctx ended
		}
		res, err := pub.Sync(ctx, nil)
		if err != nil {
			return err
		}
		s.log.Info(why+"; its objects are deleted from the stream", "cluster", id,
			"deleted", res.Published+res.Deduplicated, "withheld", res.Withheld)
		return nil
	}
	el := s.opts.Lease.Elector(id, s.log, s.clusterRegisterer(id), nil)
	if el == nil {
		_ = work(ctx)
		return
	}
	wait := 2 * cmp.Or(s.opts.Lease.TTL, lease.DefaultTTL)
	if ran, _ := runOnce(ctx, el, wait, work); !ran && ctx.Err() == nil {
		s.log.Warn(why+"; another instance holds its writer lease and deletes its objects", "cluster", id, "waited", wait)
	}
}

// runOnce runs work once as el's lease holder, if the lease is won within
// wait; it reports whether work ran.
func runOnce(ctx context.Context, el *lease.Elector, wait time.Duration, work func(context.Context) error) (bool, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu               sync.Mutex
		started, expired bool
		werr             error
	)
	timer := time.AfterFunc(wait, func() {
		mu.Lock()
		defer mu.Unlock()
		if !started {
			expired = true
			cancel()
		}
	})
	defer timer.Stop()
	_ = el.Run(ctx, func(wctx context.Context) error {
		mu.Lock()
		if expired {
			mu.Unlock()
			return errOnceDone
		}
		started = true
		mu.Unlock()
		werr = work(wctx)
		cancel() // one term only; Run releases the lease
		return errOnceDone
	})
	mu.Lock()
	defer mu.Unlock()
	return started, werr
}

// errOnceDone ends runOnce's Run after its one term.
var errOnceDone = errors.New("done")

// Status describes every running cluster, sorted by id.
func (s *Source) Status() []ClusterStatus {
	s.mu.Lock()
	cs := make([]*cluster, 0, len(s.clusters))
	var out []ClusterStatus
	for _, r := range s.clusters {
		if r.c != nil {
			cs = append(cs, r.c)
			continue
		}
		st := ClusterStatus{ID: r.id, Origin: r.origin, State: StateSyncing}
		if r.holder != "" {
			st.State, st.Holder = StateStandby, r.holder
		}
		out = append(out, st)
	}
	s.mu.Unlock()
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
