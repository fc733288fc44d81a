package kubesource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"

	"github.com/pilotwire/pilotwire/pkg/gatewayapi"
	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ingest/internal/promreg"
)

// DefaultGatewayStatusDebounce is how long the Gateway API status writer
// gathers changes before it recomputes and writes status.
const DefaultGatewayStatusDebounce = time.Second

// gatewayAPIPoll is how often the status writer looks again for the
// Gateway API CRDs while they are not installed.
const gatewayAPIPoll = 30 * time.Second

// Resources the status writer watches.
var (
	gvrGateway        = schema.GroupVersionResource{Group: GroupGatewayAPI, Version: "v1", Resource: "gateways"}
	gvrHTTPRoute      = schema.GroupVersionResource{Group: GroupGatewayAPI, Version: "v1", Resource: "httproutes"}
	gvrGRPCRoute      = schema.GroupVersionResource{Group: GroupGatewayAPI, Version: "v1", Resource: "grpcroutes"}
	gvrReferenceGrant = schema.GroupVersionResource{Group: GroupGatewayAPI, Version: "v1beta1", Resource: "referencegrants"}
	gvrServiceEntry   = schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "serviceentries"}
)

type statusMetrics struct {
	writes   *prometheus.CounterVec
	failures prometheus.Counter
}

func newStatusMetrics(reg prometheus.Registerer, cluster string) statusMetrics {
	writes := promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pilotwire_ingest_gateway_status_writes_total",
		Help: "Gateway API status updates written to the Kubernetes API, by kind.",
	}, []string{"cluster", "kind"}))
	failures := promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pilotwire_ingest_gateway_status_errors_total",
		Help: "Gateway API status rounds that failed to write some status (retried after a backoff).",
	}, []string{"cluster"}))
	return statusMetrics{writes: writes.MustCurryWith(prometheus.Labels{"cluster": cluster}), failures: failures.WithLabelValues(cluster)}
}

// statusWriter computes the status of one cluster's Gateway API objects
// with gatewayapi.Convert and writes what changed, for one lease term.
type statusWriter struct {
	// set at construction
	cluster  string
	cfg      *rest.Config
	debounce time.Duration
	domain   string
	log      *slog.Logger
	metrics  statusMetrics

	// owned by run
	dyn    dynamic.Interface
	stores map[schema.GroupVersionResource]cache.Store
	svcs   cache.Store
	nss    cache.Store
}

// runGatewayStatus writes the cluster's Gateway API status until ctx (the
// term, while this instance holds the cluster's lease) ends.
func (s *Source) runGatewayStatus(ctx context.Context, r *running) {
	w := &statusWriter{
		cluster: r.id, cfg: r.cfg,
		debounce: s.opts.GatewayStatusDebounce, domain: s.opts.DomainSuffix,
		log:     s.log.With("cluster", r.id, "component", "gateway-status"),
		metrics: newStatusMetrics(s.opts.Registerer, r.id),
	}
	if w.debounce <= 0 {
		w.debounce = DefaultGatewayStatusDebounce
	}
	w.run(ctx)
}

func (w *statusWriter) run(ctx context.Context) {
	cfg := rest.CopyConfig(w.cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "pilotwire-ingest-gateway-status"
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err == nil {
		w.dyn, err = dynamic.NewForConfig(cfg)
	}
	if err != nil {
		w.log.Error("cannot build clients; not writing Gateway API status", "err", err)
		return
	}
	if !w.waitServed(ctx, kube) {
		return
	}
	withSE := served(kube, gvrServiceEntry)
	kick := make(chan struct{}, 1)
	onChange := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { nudge(kick) },
		UpdateFunc: func(any, any) { nudge(kick) },
		DeleteFunc: func(any) { nudge(kick) },
	}
	df := dynamicinformer.NewDynamicSharedInformerFactory(w.dyn, 0)
	kf := informers.NewSharedInformerFactory(kube, 0)
	w.stores = make(map[schema.GroupVersionResource]cache.Store)
	gvrs := []schema.GroupVersionResource{gvrGateway, gvrHTTPRoute, gvrGRPCRoute, gvrReferenceGrant}
	if withSE {
		gvrs = append(gvrs, gvrServiceEntry)
	}
	for _, gvr := range gvrs {
		inf := df.ForResource(gvr).Informer()
		if _, err := inf.AddEventHandler(onChange); err != nil {
			w.log.Error("cannot watch; not writing Gateway API status", "resource", gvr.Resource, "err", err)
			return
		}
		w.stores[gvr] = inf.GetStore()
	}
	svcInf, nsInf := kf.Core().V1().Services().Informer(), kf.Core().V1().Namespaces().Informer()
	for _, inf := range []cache.SharedIndexInformer{svcInf, nsInf} {
		if _, err := inf.AddEventHandler(onChange); err != nil {
			w.log.Error("cannot watch; not writing Gateway API status", "err", err)
			return
		}
	}
	w.svcs, w.nss = svcInf.GetStore(), nsInf.GetStore()
	df.Start(ctx.Done())
	kf.Start(ctx.Done())
	defer df.Shutdown()
	defer kf.Shutdown()
	df.WaitForCacheSync(ctx.Done())
	kf.WaitForCacheSync(ctx.Done())
	w.log.Info("writing Gateway API status", "debounce", w.debounce, "service_entries", withSE)

	timer := time.NewTimer(0)
	defer timer.Stop()
	pending := true // one round after the initial lists
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
			if !pending { // the first change of a burst starts the wait
				pending = true
				timer.Reset(w.debounce)
			}
		case <-timer.C:
			pending = false
			err := svc.Retry(ctx, svc.RetryOptions{
				First: 200 * time.Millisecond, Max: 30 * time.Second,
				Log: w.log, Msg: "cannot write Gateway API status, retrying", Failures: w.metrics.failures,
			}, func() error { return w.sync(ctx) })
			if err != nil {
				return // ctx ended
			}
		}
	}
}

func nudge(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// waitServed waits until the API server serves the Gateway API routes.
func (w *statusWriter) waitServed(ctx context.Context, kube kubernetes.Interface) bool {
	logged := false
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
		if served(kube, gvrHTTPRoute) && served(kube, gvrReferenceGrant) {
			return true
		}
		if !logged {
			logged = true
			w.log.Info("Gateway API CRDs not served; the status writer waits for them", "poll", gatewayAPIPoll)
		}
		t.Reset(gatewayAPIPoll)
	}
}

func served(kube kubernetes.Interface, gvr schema.GroupVersionResource) bool {
	rl, err := kube.Discovery().ServerResourcesForGroupVersion(gvr.GroupVersion().String())
	if err != nil {
		return false
	}
	for _, r := range rl.APIResources {
		if r.Name == gvr.Resource {
			return true
		}
	}
	return false
}

// sync computes the status from the informer stores and writes every
// object whose status differs. It returns the write errors.
func (w *statusWriter) sync(ctx context.Context) error {
	in := gatewayapi.Input{DomainSuffix: w.domain, Namespaces: make(map[string]map[string]string)}
	gateways := decodeAll[gwv1.Gateway](w, gvrGateway)
	httpRoutes := decodeAll[gwv1.HTTPRoute](w, gvrHTTPRoute)
	grpcRoutes := decodeAll[gwv1.GRPCRoute](w, gvrGRPCRoute)
	for _, o := range gateways {
		in.Gateways = append(in.Gateways, o.obj)
	}
	for _, o := range httpRoutes {
		in.HTTPRoutes = append(in.HTTPRoutes, o.obj)
	}
	for _, o := range grpcRoutes {
		in.GRPCRoutes = append(in.GRPCRoutes, o.obj)
	}
	for _, o := range decodeAll[gwv1beta1.ReferenceGrant](w, gvrReferenceGrant) {
		in.ReferenceGrants = append(in.ReferenceGrants, o.obj)
	}
	for _, o := range decodeAll[serviceEntry](w, gvrServiceEntry) {
		in.ServiceEntries = append(in.ServiceEntries, gatewayapi.ServiceEntry{Namespace: o.obj.Namespace, Name: o.obj.Name, Hosts: o.obj.Spec.Hosts})
	}
	for _, o := range w.svcs.List() {
		if m, err := apimeta.Accessor(o); err == nil {
			in.Services = append(in.Services, types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()})
		}
	}
	for _, o := range w.nss.List() {
		if m, err := apimeta.Accessor(o); err == nil {
			in.Namespaces[m.GetName()] = m.GetLabels()
		}
	}
	out := gatewayapi.Convert(in)
	now := metav1.Now()

	var errs []error
	for _, gs := range out.Status.Gateways {
		o, ok := gateways[gs.Ref.Namespace+"/"+gs.Ref.Name]
		if !ok {
			continue
		}
		want := mergeGatewayStatus(o.obj.Status, gs.Status, now)
		if !equality.Semantic.DeepEqual(o.obj.Status, want) {
			errs = append(errs, w.write(ctx, gvrGateway, o.u, &want, gatewayapi.KindGateway))
		}
	}
	ours := make(map[gatewayapi.Ref][]gwv1.RouteParentStatus)
	for _, rs := range out.Status.Routes {
		ours[rs.Ref] = rs.Parents
	}
	// Every route, so that parents this controller no longer handles lose
	// the entries it wrote.
	for _, set := range []struct {
		kind string
		gvr  schema.GroupVersionResource
		objs map[string]decoded[gwv1.RouteStatus]
	}{
		{gatewayapi.KindHTTPRoute, gvrHTTPRoute, routeStatuses(httpRoutes, func(r *gwv1.HTTPRoute) gwv1.RouteStatus { return r.Status.RouteStatus })},
		{gatewayapi.KindGRPCRoute, gvrGRPCRoute, routeStatuses(grpcRoutes, func(r *gwv1.GRPCRoute) gwv1.RouteStatus { return r.Status.RouteStatus })},
	} {
		for _, o := range set.objs {
			ref := gatewayapi.Ref{Kind: set.kind, Namespace: o.u.GetNamespace(), Name: o.u.GetName()}
			want := mergeRouteStatus(*o.obj, ours[ref], now)
			if !equality.Semantic.DeepEqual(*o.obj, want) {
				errs = append(errs, w.write(ctx, set.gvr, o.u, &want, set.kind))
			}
		}
	}
	return errors.Join(errs...)
}

// write replaces an object's status with status (a pointer to the
// status struct), updating the version in the informer store: a conflict
// means a newer version is on its way, and the retry uses it.
func (w *statusWriter) write(ctx context.Context, gvr schema.GroupVersionResource, u *unstructured.Unstructured, status any, kind string) error {
	st, err := runtime.DefaultUnstructuredConverter.ToUnstructured(status)
	if err != nil {
		return fmt.Errorf("encode %s %s/%s status: %w", kind, u.GetNamespace(), u.GetName(), err)
	}
	u = u.DeepCopy()
	u.Object["status"] = st
	if _, err := w.dyn.Resource(gvr).Namespace(u.GetNamespace()).UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("write %s %s/%s status: %w", kind, u.GetNamespace(), u.GetName(), err)
	}
	w.metrics.writes.WithLabelValues(kind).Inc()
	w.log.Debug("status written", "kind", kind, "namespace", u.GetNamespace(), "name", u.GetName())
	return nil
}
