package ca

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// What the CA publishes into every namespace, as Istio's namespace
// controller does: istio-agent and injected pods mount it.
const (
	// RootCertConfigMap is the ConfigMap holding the mesh's roots.
	RootCertConfigMap = "istio-ca-root-cert"
	// RootCertKey is its data key.
	RootCertKey = "root-cert.pem"

	publishWorkers = 2
	// publishMaxRetries: a namespace whose write fails this many times in
	// a row is dropped until its next event.
	publishMaxRetries = 10
)

// configMapLabels mark the ConfigMap as Istio's.
var configMapLabels = map[string]string{"istio.io/config": "true"}

// ignoredNamespaces get no root certificate (Istio's list, which leaves
// kube-system in).
var ignoredNamespaces = map[string]bool{"kube-public": true, "kube-node-lease": true, "local-path-storage": true}

// rootPublisher keeps istio-ca-root-cert in every namespace, holding the
// CA's roots: it creates it in each namespace (new ones too), and puts it
// back when it is deleted or its root-cert.pem edited. Other keys of the
// ConfigMap are left alone.
type rootPublisher struct {
	// Set at construction.
	client  kubernetes.Interface
	rootPEM string
	metrics *metrics
	reg     prometheus.Registerer
	log     *slog.Logger

	// Set by run before any worker starts.
	namespaces corelisters.NamespaceLister
	configMaps corelisters.ConfigMapLister
	queue      workqueue.TypedRateLimitingInterface[string]
}

// run watches Namespaces and the istio-ca-root-cert ConfigMaps and
// reconciles each namespace that changes, until ctx ends. It calls synced
// once both caches hold the cluster's state.
func (p *rootPublisher) run(ctx context.Context, synced func()) error {
	nsFactory := informers.NewSharedInformerFactory(p.client, 0)
	cmFactory := informers.NewSharedInformerFactoryWithOptions(p.client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", RootCertConfigMap).String()
	}))
	nsInformer := nsFactory.Core().V1().Namespaces()
	cmInformer := cmFactory.Core().V1().ConfigMaps()
	p.namespaces, p.configMaps = nsInformer.Lister(), cmInformer.Lister()
	p.queue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "ca-root-cert"})
	queue := p.queue
	if err := p.reg.Register(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pilotwire_ca_root_cert_queue_length", Help: "Namespaces waiting for their istio-ca-root-cert ConfigMap to be checked.",
	}, func() float64 { return float64(queue.Len()) })); err != nil {
		queue.ShutDown()
		return fmt.Errorf("register queue metric: %w", err)
	}

	enqueueNamespace := func(obj any) {
		if ns, ok := obj.(*corev1.Namespace); ok {
			p.queue.Add(ns.Name)
		}
	}
	enqueueOwner := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			p.queue.Add(cm.Namespace)
		}
	}
	if _, err := nsInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueueNamespace,
		UpdateFunc: func(_, obj any) { enqueueNamespace(obj) },
	}); err != nil {
		return fmt.Errorf("namespace handler: %w", err)
	}
	if _, err := cmInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueueOwner,
		UpdateFunc: func(_, obj any) { enqueueOwner(obj) },
		DeleteFunc: enqueueOwner,
	}); err != nil {
		return fmt.Errorf("configmap handler: %w", err)
	}

	var wg sync.WaitGroup
	defer func() {
		p.queue.ShutDown()
		wg.Wait()
		nsFactory.Shutdown()
		cmFactory.Shutdown()
	}()
	nsFactory.Start(ctx.Done())
	cmFactory.Start(ctx.Done())
	for typ, ok := range nsFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("sync %v: %w", typ, ctx.Err())
		}
	}
	for typ, ok := range cmFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("sync %v: %w", typ, ctx.Err())
		}
	}
	for range publishWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p.next(ctx) {
			}
		}()
	}
	synced()
	<-ctx.Done()
	return nil
}

// next reconciles one namespace from the queue; false once it shuts down.
func (p *rootPublisher) next(ctx context.Context) bool {
	ns, shutdown := p.queue.Get()
	if shutdown {
		return false
	}
	defer p.queue.Done(ns)
	err := p.reconcile(ctx, ns)
	switch {
	case err == nil:
		p.queue.Forget(ns)
	case ctx.Err() != nil:
		p.queue.Forget(ns)
	case p.queue.NumRequeues(ns) < publishMaxRetries:
		p.metrics.rootCertErrors.Inc()
		p.log.Warn("root certificate not published; retrying", "namespace", ns, "err", err)
		p.queue.AddRateLimited(ns)
	default:
		p.metrics.rootCertErrors.Inc()
		p.log.Error("root certificate not published; giving up until the namespace changes", "namespace", ns, "err", err)
		p.queue.Forget(ns)
	}
	return true
}

// reconcile makes namespace ns hold istio-ca-root-cert with the CA's
// roots, unless ns is ignored, gone or terminating.
func (p *rootPublisher) reconcile(ctx context.Context, ns string) error {
	if ignoredNamespaces[ns] {
		return nil
	}
	namespace, err := p.namespaces.Get(ns)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("namespace %s: %w", ns, err)
	}
	if namespace.Status.Phase == corev1.NamespaceTerminating {
		return nil
	}
	cms := p.client.CoreV1().ConfigMaps(ns)
	cm, err := p.configMaps.ConfigMaps(ns).Get(RootCertConfigMap)
	if apierrors.IsNotFound(err) {
		_, err := cms.Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: RootCertConfigMap, Namespace: ns, Labels: configMapLabels},
			Data:       map[string]string{RootCertKey: p.rootPEM},
		}, metav1.CreateOptions{})
		switch {
		case err == nil:
			p.metrics.rootCertWrites.WithLabelValues("create").Inc()
			p.log.Debug("root certificate published", "namespace", ns)
			return nil
		case apierrors.IsAlreadyExists(err):
			// The cache is behind; its add event brings ns back.
			return nil
		case apierrors.IsNotFound(err) || apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			return nil // the namespace went away meanwhile
		case apierrors.IsForbidden(err):
			p.log.Warn("may not create the root certificate ConfigMap", "namespace", ns, "err", err)
			return nil
		default:
			return fmt.Errorf("create configmap %s/%s: %w", ns, RootCertConfigMap, err)
		}
	}
	if err != nil {
		return fmt.Errorf("configmap %s/%s: %w", ns, RootCertConfigMap, err)
	}
	if cm.Data[RootCertKey] == p.rootPEM {
		return nil
	}
	updated := cm.DeepCopy()
	if updated.Data == nil {
		updated.Data = map[string]string{}
	}
	updated.Data[RootCertKey] = p.rootPEM
	if _, err := cms.Update(ctx, updated, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // deleted meanwhile: its delete event brings ns back
		}
		return fmt.Errorf("update configmap %s/%s: %w", ns, RootCertConfigMap, err)
	}
	p.metrics.rootCertWrites.WithLabelValues("update").Inc()
	p.log.Info("root certificate repaired", "namespace", ns)
	return nil
}
