package kubesource

import (
	"context"
	"crypto/sha256"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
)

// secretController adds, replaces and removes the clusters that Istio's
// multicluster Secrets in the config cluster name. Its handler only
// enqueues Secret keys; its worker reconciles one Secret at a time.
type secretController struct {
	// set at construction
	src     *Source
	id      string // the config cluster's id
	cfg     *rest.Config
	log     *slog.Logger
	queue   *workqueue.Typed[string]
	settled chan struct{} // closed once the initial Secrets are applied, or at the sync timeout
	settle  sync.Once

	// owned by run's goroutine
	store    cache.Store
	bySecret map[string]map[string][sha256.Size]byte // Secret key → cluster id → kubeconfig hash
}

func newSecretController(src *Source, id string, cfg *rest.Config, settled chan struct{}) *secretController {
	return &secretController{
		src:      src,
		id:       id,
		cfg:      cfg,
		log:      src.log.With("cluster", id, "secrets", src.opts.SecretNamespace),
		queue:    workqueue.NewTyped[string](),
		settled:  settled,
		bySecret: make(map[string]map[string][sha256.Size]byte),
	}
}

// run watches the Secrets until ctx ends. It applies the Secrets present
// at start before reporting itself settled, so that readiness can wait for
// their clusters.
func (sc *secretController) run(ctx context.Context) {
	defer sc.markSettled()
	ctx = klog.NewContext(ctx, logr.FromSlogHandler(sc.log.Handler()))
	var wg sync.WaitGroup
	defer wg.Wait()
	defer sc.queue.ShutDown()
	wg.Go(func() {
		<-ctx.Done()
		sc.queue.ShutDown()
	})

	cfg := rest.CopyConfig(sc.cfg)
	cfg.UserAgent = "pilotwire-ingest"
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		sc.log.Error("cannot build a client for the multicluster Secrets", "err", err)
		return
	}
	selector := MultiClusterSecretLabel + "=true"
	inf := coreinformers.NewFilteredSecretInformer(kube, sc.src.opts.SecretNamespace, 0, cache.Indexers{},
		func(o *metav1.ListOptions) { o.LabelSelector = selector })
	errs := sc.src.metrics.errors.WithLabelValues(sc.id, errWatch)
	_ = inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, _ *cache.Reflector, err error) {
		if ctx.Err() == nil {
			errs.Inc()
			sc.log.Warn("list/watch of multicluster Secrets failed; client-go retries", "err", err)
		}
	})
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			sc.queue.Add(key)
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, n any) { enqueue(n) },
		DeleteFunc: enqueue,
	})
	if err != nil {
		sc.log.Error("cannot watch the multicluster Secrets", "err", err)
		return
	}
	sc.store = inf.GetStore()
	wg.Go(func() { inf.RunWithContext(ctx) })

	timeout := time.NewTimer(sc.src.opts.SyncTimeout)
	defer timeout.Stop()
	synced := reg.HasSyncedChecker().Done()
wait:
	for {
		select {
		case <-synced:
			break wait
		case <-timeout.C:
			sc.src.metrics.timeouts.WithLabelValues(sc.id).Inc()
			sc.log.Warn("multicluster Secrets not listed within the timeout; not waiting for them any more (still trying)",
				"timeout", sc.src.opts.SyncTimeout)
			sc.markSettled()
		case <-ctx.Done():
			return
		}
	}
	for _, key := range sc.store.ListKeys() {
		sc.reconcile(ctx, key)
	}
	sc.log.Info("multicluster Secrets applied", "secrets", len(sc.bySecret))
	sc.markSettled()
	// Every Secret is listed: a cluster from a Secret that is on the
	// stream but not running had its Secret removed while ingest was down.
	sc.src.reconcileStale(ctx)
	for {
		key, shutdown := sc.queue.Get()
		if shutdown {
			return
		}
		sc.reconcile(ctx, key)
		sc.queue.Done(key)
	}
}

func (sc *secretController) markSettled() { sc.settle.Do(func() { close(sc.settled) }) }

// reconcile makes the running clusters match one Secret: a new key adds a
// cluster, a changed kubeconfig replaces it, a removed key (or Secret)
// removes it and deletes its objects from the stream.
func (sc *secretController) reconcile(ctx context.Context, key string) {
	want := make(map[string][]byte)
	if obj, exists, err := sc.store.GetByKey(key); err == nil && exists {
		if s, ok := obj.(*corev1.Secret); ok {
			for id, data := range s.Data {
				want[id] = data
			}
		}
	}
	have := sc.bySecret[key]
	if have == nil {
		have = make(map[string][sha256.Size]byte)
	}
	removed := false
	for id := range have {
		if _, ok := want[id]; !ok {
			sc.log.Info("cluster removed from its multicluster Secret", "secret", key, "remote", id)
			sc.src.removeCluster(ctx, id, true)
			delete(have, id)
			removed = true
		}
	}
	for id, data := range want {
		sum := sha256.Sum256(data)
		cur, running := have[id]
		if running && cur == sum {
			continue
		}
		cfg, err := configFromSecret(data)
		if err != nil {
			sc.src.metrics.errors.WithLabelValues(id, errKubeconfig).Inc()
			sc.log.Error("unusable kubeconfig in multicluster Secret; ignoring it (a running cluster keeps its old config)",
				"secret", key, "remote", id, "err", err)
			continue
		}
		cfg.QPS, cfg.Burst = sc.src.opts.ClientQPS, sc.src.opts.ClientBurst
		if running {
			sc.log.Info("kubeconfig changed; restarting the cluster", "secret", key, "remote", id)
			sc.src.removeCluster(ctx, id, false)
			delete(have, id)
		}
		err = sc.src.addCluster(ctx, id, originSecret+" "+key, originSecret, cfg, false)
		if errors.Is(err, errDuplicateCluster) {
			sc.src.metrics.errors.WithLabelValues(id, errDuplicate).Inc()
			sc.log.Warn("multicluster Secret names a cluster id already in use; ignoring it", "secret", key, "remote", id)
			continue
		}
		if err != nil {
			sc.log.Error("cannot add cluster", "secret", key, "remote", id, "err", err)
			continue
		}
		have[id] = sum
	}
	if len(have) == 0 {
		delete(sc.bySecret, key)
	} else {
		sc.bySecret[key] = have
	}
	if removed {
		// A cluster id may have been refused as a duplicate of the one
		// just removed: look at every Secret again (unchanged ones are
		// no-ops).
		for _, k := range sc.store.ListKeys() {
			if k != key {
				sc.queue.Add(k)
			}
		}
	}
}
