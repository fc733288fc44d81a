package ingest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ingest/filesource"
	"github.com/pilotwire/pilotwire/services/ingest/kubesource"
	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

// Run runs the ingest service until ctx ends. Each source (the config dir,
// the Kubernetes clusters) reads what the CHANGES stream holds for its
// cluster ids (retrying until NATS answers), publishes the difference with
// what it sees, then follows changes. Health turns ready, and the log says
// "ingest ready", once every source has: the file source its initial scan,
// the Kubernetes source every cluster synced or past its sync timeout.
// With d.Debug set, /debug/clusterz lists the Kubernetes clusters and their
// sync state, as JSON. It returns nil when ctx ends. d.NC is not used;
// d.Reg, d.Health and d.Debug may be nil.
func Run(ctx context.Context, cfg Config, d svc.Deps) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	js, log, health := d.JS, d.Log, d.Health
	var reg prometheus.Registerer
	if d.Reg != nil {
		reg = d.Reg
	}
	names, err := cfg.Names()
	if err != nil {
		return err
	}
	if health == nil {
		health = &svc.Health{}
	}
	ready := &readiness{health: health, pending: make(map[string]string), onReady: func() {
		id := cfg.ClusterID
		if !cfg.ConfigClusterSet() && cfg.FileSource() {
			id = cfg.fileClusterID()
		}
		log.Info("ingest ready", "cluster", id, "config_dir", cfg.ConfigDir, "kube_clusters", len(cfg.Clusters)+btoi(cfg.ConfigClusterSet()))
	}}

	// Every part is pending from the start: readiness must not pass
	// through "all ready" between the streams and the sources.
	ready.set("streams", "opening the change stream and the lease bucket")
	if cfg.FileSource() {
		ready.set("files", "waiting for the change stream")
	}
	if cfg.KubeSource() {
		ready.set("kubernetes", "waiting for the change stream")
	}

	// One active writer per cluster id: the holder of its lease.
	streams := svc.NewStreams(svc.Deps{JS: js, Log: log, Reg: d.Reg})
	streams.OnWait = func(name string, err error) { ready.set("streams", "waiting for "+name+": "+err.Error()) }
	if _, err := streams.Stream(ctx, names.ChangesConfig(cfg.StreamOptions())); err != nil {
		return nil // ctx ended
	}
	leases, err := streams.KV(ctx, names.LeaseConfig(cfg.StreamOptions()))
	if err != nil {
		return nil // ctx ended
	}
	ready.set("streams", "")
	lo := publish.LeaseOptions{KV: leases, Holder: cfg.ID, TTL: cfg.LeaseTTL}
	if lo.Holder == "" {
		lo.Holder = svc.InstanceID("ingest")
	}

	type starter func(ctx context.Context) error
	var sources []starter

	if cfg.FileSource() {
		id := cfg.fileClusterID()
		ready.set("files", "reading the change stream")
		var src *filesource.Source
		po := cfg.publishOptions(names)
		po.Cluster, po.Log, po.Registerer = id, log, clusterRegisterer(reg, id)
		// Called from within the source's Sync and Apply, once src is set.
		po.Reread = func(k publish.Key) (publish.Change, bool) { return src.Current(k) }
		pub, err := publish.New(js, po)
		if err != nil {
			return err
		}
		src, err = filesource.New(pub, filesource.Options{
			Dir:        cfg.ConfigDir,
			Quiet:      cfg.FileDebounce,
			Log:        log,
			Registerer: reg,
		})
		if err != nil {
			return err
		}
		term := func(ctx context.Context) error {
			notReady := func(err error, _ time.Duration) { ready.set("files", "reading the change stream: "+err.Error()) }
			if err := pub.StartRetrying(ctx, notReady); err != nil {
				return nil // ctx ended
			}
			ready.set("files", "publishing the initial scan")
			err := src.Run(ctx, func(res publish.Result) {
				log.Info("file source ready", "cluster", id, "config_dir", cfg.ConfigDir,
					"published", res.Published, "unchanged", res.Unchanged, "rejected", res.Rejected)
				ready.set("files", "")
			})
			if err != nil {
				return fmt.Errorf("file source: %w", err)
			}
			return nil
		}
		holder := ""
		el := lo.Elector(id, log, clusterRegisterer(reg, id), func(h string) {
			if h != holder {
				holder = h // Run's goroutine only
				log.Info("another instance writes the file source's cluster; standing by", "cluster", id, "holder", h)
			}
			ready.set("files", "")
		})
		sources = append(sources, func(ctx context.Context) error {
			if el == nil {
				return term(ctx)
			}
			return el.Run(ctx, func(ctx context.Context) error {
				holder = ""
				return term(ctx)
			})
		})
	}

	if cfg.KubeSource() {
		clusters, err := cfg.kubeClusters()
		if err != nil {
			return err
		}
		ko := kubesource.Options{
			Clusters:          clusters,
			EnableGatewayAPI:  cfg.EnableGatewayAPI,
			SyncTimeout:       cfg.ClusterSyncTimeout,
			SecretNamespace:   cfg.ClusterSecretsNamespace,
			ClientQPS:         cfg.kubeQPS(),
			ClientBurst:       cfg.kubeBurst(),
			ClientCompression: cfg.KubeClientCompression,
			Publish:           cfg.publishOptions(names),
			Lease:             lo,
			Log:               log,
			Registerer:        reg,
		}
		// The Gateway API status writer runs under each config cluster's lease.
		ko.GatewayStatusDebounce = cfg.GatewayStatusDebounce
		if cfg.FileSource() {
			ko.ReservedIDs = []string{cfg.fileClusterID()}
		}
		if cfg.ConfigClusterSet() && cfg.ClusterSecretsNamespace != "" {
			ko.ConfigCluster = cfg.ClusterID
		}
		ks, err := kubesource.New(js, ko)
		if err != nil {
			return err
		}
		if d.Debug != nil {
			d.Debug.Handle("/debug/clusterz", ks)
		}
		ready.set("kubernetes", "syncing Kubernetes clusters (see /debug/clusterz)")
		sources = append(sources, func(ctx context.Context) error {
			return ks.Run(ctx, func(st []kubesource.ClusterStatus) {
				var synced, late []string
				for _, s := range st {
					if s.State == kubesource.StateSynced {
						synced = append(synced, s.ID)
					} else {
						late = append(late, s.ID)
					}
				}
				if len(late) > 0 {
					log.Warn("Kubernetes source ready without clusters that did not sync in time (they keep trying; see /debug/clusterz)",
						"synced", synced, "not_synced", late, "timeout", ko.SyncTimeout)
				}
				log.Info("kubernetes source ready", "cluster", cfg.ClusterID, "synced", synced, "not_synced", late)
				ready.set("kubernetes", "")
			})
		})
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, len(sources))
	for _, run := range sources {
		wg.Go(func() {
			if err := run(ctx); err != nil {
				errc <- err
				cancel()
			}
		})
	}
	wg.Wait()
	close(errc)
	if err := <-errc; err != nil {
		health.SetNotReady(err.Error())
		return err
	}
	return nil
}

// clusterRegisterer labels a publisher's metrics with its cluster id, so
// that several publishers (one per cluster) share one registry.
func clusterRegisterer(reg prometheus.Registerer, cluster string) prometheus.Registerer {
	if reg == nil {
		return nil
	}
	return prometheus.WrapRegistererWith(prometheus.Labels{"cluster": cluster}, reg)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// readiness is ready when every part is.
type readiness struct {
	// set at construction
	health  *svc.Health
	onReady func() // called once, the first time every part is ready

	mu      sync.Mutex
	pending map[string]string // part → why it is not ready; guarded by mu
	fired   bool              // guarded by mu
}

// set records a part's state: reason "" is ready.
func (r *readiness) set(part, reason string) {
	r.mu.Lock()
	if reason == "" {
		delete(r.pending, part)
	} else {
		r.pending[part] = reason
	}
	r.mu.Unlock()
	r.check()
}

// check publishes the combined state to health.
func (r *readiness) check() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) > 0 {
		parts := make([]string, 0, len(r.pending))
		for p, why := range r.pending {
			parts = append(parts, p+": "+why)
		}
		slices.Sort(parts)
		r.health.SetNotReady(strings.Join(parts, "; "))
		return
	}
	r.health.SetReady()
	if !r.fired {
		r.fired = true
		r.onReady()
	}
}
