package kubesource

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/go-logr/logr"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	coreinformers "k8s.io/client-go/informers/core/v1"
	discoveryinformers "k8s.io/client-go/informers/discovery/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

// State is where a cluster is in its life.
type State string

// States of a cluster.
const (
	// StateSyncing: informers are listing, nothing published yet.
	StateSyncing State = "syncing"
	// StateTimedOut: not synced within the sync timeout; it no longer holds
	// up readiness and keeps trying.
	StateTimedOut State = "timed_out"
	// StateSynced: the cluster's objects are on the stream and followed.
	StateSynced State = "synced"
	// StateStandby: another instance holds the cluster's writer lease
	// (Holder says which); this one watches nothing and takes over when
	// the lease is free.
	StateStandby State = "standby"
)

// ClusterStatus describes one running cluster.
type ClusterStatus struct {
	ID string `json:"id"`
	// Origin says where the cluster came from: "flag", "in-cluster" or
	// "secret <namespace>/<name>".
	Origin string `json:"origin"`
	State  State  `json:"state"`
	// Kinds watched, as Kind[.group]/version, sorted.
	Kinds []string `json:"kinds"`
	// ForbiddenKinds are watched kinds the API server forbids the source
	// to list (RBAC), as Kinds; the cluster synced without them.
	ForbiddenKinds []string   `json:"forbidden_kinds,omitempty"`
	StartedAt      time.Time  `json:"started_at"`
	SyncedAt       *time.Time `json:"synced_at,omitempty"`
	// LastError is the last list/watch error, if any.
	LastError string `json:"last_error,omitempty"`
	// Holder is the instance writing the cluster, while standing by.
	Holder string `json:"holder,omitempty"`
}

// cluster watches one Kubernetes cluster and feeds its publisher, for one
// term (see running).
type cluster struct {
	// set at construction
	id     string
	origin string
	cfg    *rest.Config
	config bool // watch config kinds (Istio, Gateway API) too
	src    *Source
	r      *running
	sink   Sink // set before run
	log    *slog.Logger
	queue  *workqueue.Typed[item]
	kick   chan struct{} // CRD changes for discovery, capacity 1

	// guarded by mu
	mu         sync.Mutex
	handlers   map[schema.GroupVersionKind]*kindHandler
	forbidden  map[*kindHandler]string // kinds forbidden to list, by label (see forbidden.go)
	changed    chan struct{}           // closed and replaced whenever handlers change
	discovered bool                    // discovery has reconciled at least once
	initial    bool                    // the initial sync's snapshot was taken
	state      State
	startedAt  time.Time
	syncedAt   time.Time
	lastErr    string
}

func newCluster(src *Source, r *running) *cluster {
	return &cluster{
		id:     r.id,
		origin: r.origin,
		cfg:    r.cfg,
		config: r.config,
		src:    src,
		r:      r,
		log:    src.log.With("cluster", r.id),
		queue: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[item]{
			Name:            r.id,
			MetricsProvider: queueMetrics{src.metrics},
		}),
		kick:      make(chan struct{}, 1),
		handlers:  make(map[schema.GroupVersionKind]*kindHandler),
		forbidden: make(map[*kindHandler]string),
		changed:   make(chan struct{}),
		state:     StateSyncing,
		startedAt: time.Now(),
	}
}

// clients are one cluster's API clients.
type clients struct {
	kube kubernetes.Interface
	dyn  dynamic.Interface
	ext  apiextensionsclient.Interface
}

// clientConfig is the config of a cluster's clients: cfg with ingest's
// user agent and, unless compression is asked for, no gzip (see
// Options.ClientCompression).
func clientConfig(cfg *rest.Config, compression bool) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "pilotwire-ingest"
	}
	if !compression {
		cfg.DisableCompression = true
	}
	return cfg
}

func newClients(cfg *rest.Config, compression bool) (clients, error) {
	cfg = clientConfig(cfg, compression)
	var c clients
	var err error
	// Core kinds over protobuf: a fraction of JSON's size and decode time.
	pcfg := rest.CopyConfig(cfg)
	pcfg.ContentType = "application/vnd.kubernetes.protobuf"
	pcfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	if c.kube, err = kubernetes.NewForConfig(pcfg); err != nil {
		return c, fmt.Errorf("kubernetes client: %w", err)
	}
	if c.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		return c, fmt.Errorf("dynamic client: %w", err)
	}
	if c.ext, err = apiextensionsclient.NewForConfig(cfg); err != nil {
		return c, fmt.Errorf("apiextensions client: %w", err)
	}
	return c, nil
}

// run watches the cluster until ctx ends: it starts the informers, waits
// for their initial lists, hands the publisher the complete object set,
// then publishes queued changes. The cluster reports itself settled (see
// Source readiness) once synced or when the sync timeout passes.
func (c *cluster) run(ctx context.Context) {
	defer c.markSettled()
	// client-go logs through the context's logger: ours.
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(c.log.Handler()))
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		cancel()
		c.queue.ShutDown()
		wg.Wait()
	}()
	wg.Go(func() {
		<-ctx.Done()
		c.queue.ShutDown() // unblocks the worker
	})
	c.src.metrics.depth.WithLabelValues(c.id).Set(0)

	timeout := time.NewTimer(c.src.opts.SyncTimeout)
	defer timeout.Stop()

	cl, err := newClients(c.cfg, c.src.opts.ClientCompression)
	if err != nil {
		c.src.metrics.errors.WithLabelValues(c.id, errClient).Inc()
		c.setLastError(err.Error())
		c.log.Error("cannot build the cluster's clients; not watching it", "err", err)
		return
	}
	if err := c.startCore(ctx, cl, &wg); err != nil {
		c.log.Error("cannot set up informers; not watching the cluster", "err", err)
		return
	}
	if c.config {
		if err := c.startDiscovery(ctx, cl, &wg); err != nil {
			c.log.Error("cannot set up CRD discovery; not watching the cluster", "err", err)
			return
		}
	} else {
		c.mu.Lock()
		c.discovered = true
		c.mu.Unlock()
	}
	if err := c.sink.StartRetrying(ctx, nil); err != nil {
		return // ctx ended
	}
	desired, keep, ok := c.waitInitial(ctx, timeout.C, func() { c.markTimedOut(ctx, cl) })
	if !ok {
		return
	}
	res, err := c.sink.SyncKeeping(ctx, desired, func(k publish.Key) bool {
		_, ok := keep[schema.GroupKind{Group: k.Group, Kind: k.Kind}]
		return ok
	})
	if err != nil {
		return // ctx ended
	}
	c.markSynced()
	c.log.Info("cluster synced", "origin", c.origin, "objects", len(desired), "published", res.Published,
		"unchanged", res.Unchanged, "deduplicated", res.Deduplicated, "rejected", res.Rejected,
		"took", time.Since(c.startedAt).Round(time.Millisecond))
	c.work(ctx)
}

// startCore creates and starts the informers of the core kinds.
func (c *cluster) startCore(ctx context.Context, cl clients, wg *sync.WaitGroup) error {
	resync := c.src.opts.ResyncPeriod
	all := metav1.NamespaceAll
	informers := map[schema.GroupVersionKind]cache.SharedIndexInformer{
		gvkService:       coreinformers.NewServiceInformer(cl.kube, all, resync, cache.Indexers{}),
		gvkEndpointSlice: discoveryinformers.NewEndpointSliceInformer(cl.kube, all, resync, cache.Indexers{}),
		gvkPod:           coreinformers.NewPodInformer(cl.kube, all, resync, cache.Indexers{}),
		gvkNode:          coreinformers.NewNodeInformer(cl.kube, resync, cache.Indexers{}),
		gvkNamespace:     coreinformers.NewNamespaceInformer(cl.kube, resync, cache.Indexers{}),
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, gvk := range CoreKinds {
		h, err := c.newKindHandler(gvk, informers[gvk], false)
		if err != nil {
			return fmt.Errorf("%s informer: %w", kindLabel(gvk.GroupKind()), err)
		}
		c.handlers[gvk] = h
		h.start(ctx, wg)
	}
	c.handlersChangedLocked()
	return nil
}

// waitInitial waits until discovery has run once and every informer
// started so far, but those forbidden to list, has delivered its initial
// list to its handler, then returns the complete object set, and the
// forbidden kinds, whose records the sync must keep. Discovery may add or remove kinds
// meanwhile; the wait then starts over with the new set. When timeout fires
// the cluster is reported as timed out and the wait goes on. It returns
// false when ctx ends.
func (c *cluster) waitInitial(ctx context.Context, timeout <-chan time.Time, timedOut func()) ([]publish.Object, map[schema.GroupKind]struct{}, bool) {
	for {
		c.mu.Lock()
		changed, discovered := c.changed, c.discovered
		var checkers []cache.DoneChecker
		for _, h := range c.handlers {
			if _, ok := c.forbidden[h]; !ok {
				checkers = append(checkers, h.reg.HasSyncedChecker())
			}
		}
		c.mu.Unlock()

		if !discovered {
			checkers = nil // wait for discovery (a change) first
		}
		restart := false
	wait:
		for i := 0; i < len(checkers) || !discovered; {
			var done <-chan struct{}
			if i < len(checkers) {
				done = checkers[i].Done()
			}
			select {
			case <-done:
				i++
			case <-changed:
				restart = true
				break wait
			case <-timeout:
				timeout = nil
				timedOut()
			case <-ctx.Done():
				return nil, nil, false
			}
		}
		if restart {
			continue
		}
		c.mu.Lock()
		if c.changed != changed {
			c.mu.Unlock()
			continue // a kind came or went after the snapshot of checkers
		}
		desired, keep := c.snapshotLocked()
		c.initial = true
		c.mu.Unlock()
		return desired, keep, true
	}
}

// snapshotLocked lists every informer's store but those of forbidden
// kinds, which it returns. Caller holds mu.
func (c *cluster) snapshotLocked() ([]publish.Object, map[schema.GroupKind]struct{}) {
	type stored struct {
		gvk schema.GroupVersionKind
		obj any
	}
	var all []stored
	keep := make(map[schema.GroupKind]struct{})
	for gvk, h := range c.handlers {
		if _, ok := c.forbidden[h]; ok {
			keep[gvk.GroupKind()] = struct{}{}
			continue
		}
		for _, obj := range h.informer.GetStore().List() {
			all = append(all, stored{gvk, obj})
		}
	}
	// The JSON of every object is most of the snapshot's cost, and the
	// informers are idle by now: encode on every core. Each worker takes
	// a contiguous share; the result keeps the listed order.
	objs := make([]publish.Object, len(all))
	errs := make([]error, len(all))
	workers := min(runtime.GOMAXPROCS(0), max(1, len(all)/snapshotShare))
	var wg sync.WaitGroup
	for w := range workers {
		lo, hi := w*len(all)/workers, (w+1)*len(all)/workers
		wg.Go(func() {
			for i := lo; i < hi; i++ {
				objs[i], errs[i] = c.toObject(all[i].gvk, all[i].obj)
			}
		})
	}
	wg.Wait()
	out := objs[:0]
	for i := range objs {
		if errs[i] != nil {
			c.encodeError(all[i].gvk, errs[i])
			continue
		}
		out = append(out, objs[i])
	}
	return out, keep
}

// snapshotShare is the fewest objects worth a goroutine of their own in
// snapshotLocked.
const snapshotShare = 256

// handlersChangedLocked wakes whoever waits on the handler set and updates
// the kinds gauge. Caller holds mu.
func (c *cluster) handlersChangedLocked() {
	close(c.changed)
	c.changed = make(chan struct{})
	c.src.metrics.kinds.WithLabelValues(c.id).Set(float64(len(c.handlers)))
}

// handler returns the handler of gvk, or nil.
func (c *cluster) handler(gvk schema.GroupVersionKind) *kindHandler {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.handlers[gvk]
}

// markTimedOut reports a cluster that has not synced within the timeout.
// client-go retries a refused connection silently, so it also asks the
// API server for its version, to say why.
func (c *cluster) markTimedOut(ctx context.Context, cl clients) {
	c.mu.Lock()
	if c.state == StateSyncing {
		c.state = StateTimedOut
	}
	c.mu.Unlock()
	c.src.metrics.timeouts.WithLabelValues(c.id).Inc()
	defer c.markSettled() // after the probe, so that the ready status says why
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if err := cl.kube.Discovery().RESTClient().Get().AbsPath("/version").Do(pctx).Error(); err != nil {
		c.setLastError("API server: " + err.Error())
	}
	c.mu.Lock()
	lastErr := c.lastErr
	c.mu.Unlock()
	c.log.Warn("cluster did not sync within the timeout; not waiting for it any more (it keeps trying)",
		"origin", c.origin, "host", c.cfg.Host, "timeout", c.src.opts.SyncTimeout, "last_error", lastErr)
}

// probeTimeout bounds the API server probe of a cluster that timed out.
const probeTimeout = 5 * time.Second

func (c *cluster) markSynced() {
	c.mu.Lock()
	c.state = StateSynced
	c.syncedAt = time.Now()
	took := c.syncedAt.Sub(c.startedAt)
	c.mu.Unlock()
	c.src.metrics.synced.WithLabelValues(c.id).Set(1)
	c.src.metrics.syncedSecs.WithLabelValues(c.id).Set(took.Seconds())
	c.markSettled()
}

func (c *cluster) markSettled() { c.r.markSettled() }

func (c *cluster) setLastError(msg string) {
	c.mu.Lock()
	c.lastErr = msg
	c.mu.Unlock()
}

// status describes the cluster.
func (c *cluster) status() ClusterStatus {
	c.mu.Lock()
	defer c.mu.Unlock()
	st := ClusterStatus{ID: c.id, Origin: c.origin, State: c.state, StartedAt: c.startedAt, LastError: c.lastErr}
	if !c.syncedAt.IsZero() {
		t := c.syncedAt
		st.SyncedAt = &t
	}
	for gvk := range c.handlers {
		st.Kinds = append(st.Kinds, kindLabel(gvk.GroupKind())+"/"+gvk.Version)
	}
	slices.Sort(st.Kinds)
	for h := range c.forbidden {
		st.ForbiddenKinds = append(st.ForbiddenKinds, kindLabel(h.gvk.GroupKind())+"/"+h.gvk.Version)
	}
	slices.Sort(st.ForbiddenKinds)
	return st
}
