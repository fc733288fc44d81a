package kubesource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
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

// Kinds the status writer reads. It follows the cluster's own informers
// of these kinds (started by startCore and CRD discovery), at the version
// each is watched; it writes the status of Gateways and routes.
var (
	gkGateway        = schema.GroupKind{Group: GroupGatewayAPI, Kind: gatewayapi.KindGateway}
	gkHTTPRoute      = schema.GroupKind{Group: GroupGatewayAPI, Kind: gatewayapi.KindHTTPRoute}
	gkGRPCRoute      = schema.GroupKind{Group: GroupGatewayAPI, Kind: gatewayapi.KindGRPCRoute}
	gkReferenceGrant = schema.GroupKind{Group: GroupGatewayAPI, Kind: "ReferenceGrant"}
	gkServiceEntry   = schema.GroupKind{Group: "networking.istio.io", Kind: "ServiceEntry"}

	statusKinds = []schema.GroupKind{gkGateway, gkHTTPRoute, gkGRPCRoute, gkReferenceGrant, gkServiceEntry,
		gvkService.GroupKind(), gvkNamespace.GroupKind()}
)

// StatusWriteKinds are the kinds whose status the writer writes (the
// update verb on their status subresource is all the RBAC it needs;
// deploy/helmtest checks the chart grants exactly that). write refuses any
// other kind, so this list cannot fall behind the code.
var StatusWriteKinds = []schema.GroupKind{gkGateway, gkHTTPRoute, gkGRPCRoute}

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
	c        *cluster
	debounce time.Duration
	domain   string
	log      *slog.Logger
	metrics  statusMetrics

	// owned by run
	dyn      dynamic.Interface
	kinds    map[schema.GroupKind]*followed
	onChange cache.ResourceEventHandler
	kick     chan struct{}
	wg       sync.WaitGroup // the followed kinds' sync waits
}

// followed is one of the cluster's informers the writer reads, with the
// writer's own event handler on it.
type followed struct {
	h      *kindHandler
	gvr    schema.GroupVersionResource
	reg    cache.ResourceEventHandlerRegistration
	cancel context.CancelFunc // ends the wait for reg to sync
}

// runGatewayStatus writes the cluster's Gateway API status until ctx (the
// term, while this instance holds the cluster's lease) ends.
func (s *Source) runGatewayStatus(ctx context.Context, c *cluster) {
	w := &statusWriter{
		c:        c,
		debounce: s.opts.GatewayStatusDebounce, domain: s.opts.DomainSuffix,
		log:     s.log.With("cluster", c.id, "component", "gateway-status"),
		metrics: newStatusMetrics(s.opts.Registerer, c.id),
	}
	if w.debounce <= 0 {
		w.debounce = DefaultGatewayStatusDebounce
	}
	w.run(ctx)
}

func (w *statusWriter) run(ctx context.Context) {
	cfg := rest.CopyConfig(w.c.cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "pilotwire-ingest-gateway-status"
	}
	var err error
	if w.dyn, err = dynamic.NewForConfig(cfg); err != nil {
		w.log.Error("cannot build a client; not writing Gateway API status", "err", err)
		return
	}
	w.kick = make(chan struct{}, 1)
	w.onChange = cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { nudge(w.kick) },
		UpdateFunc: func(any, any) { nudge(w.kick) },
		DeleteFunc: func(any) { nudge(w.kick) },
	}
	w.kinds = make(map[schema.GroupKind]*followed)
	defer func() {
		for gk := range w.kinds {
			w.unfollow(gk)
		}
		w.wg.Wait()
	}()

	timer := time.NewTimer(w.debounce) // started by the first kick
	timer.Stop()
	defer timer.Stop()
	pending, started, waitLogged := false, false, false
	for {
		changed, discovered := w.follow(ctx)
		ready := w.ready()
		switch {
		case ready && !started:
			started = true
			w.log.Info("writing Gateway API status", "debounce", w.debounce, "service_entries", w.kinds[gkServiceEntry] != nil)
		case !started && !waitLogged && discovered && (w.kinds[gkHTTPRoute] == nil || w.kinds[gkReferenceGrant] == nil):
			waitLogged = true
			w.log.Info("the HTTPRoute or ReferenceGrant CRD is not installed; the status writer waits for it")
		}
		select {
		case <-ctx.Done():
			return
		case <-changed: // kinds came or went: follow them, and a round is due
			nudge(w.kick)
		case <-w.kick:
			if !pending { // the first change of a burst starts the wait
				pending = true
				timer.Reset(w.debounce)
			}
		case <-timer.C:
			pending = false
			if !w.ready() {
				continue // the kick of the last sync brings the first round
			}
			err := svc.Retry(ctx, svc.RetryOptions{
				First: 200 * time.Millisecond, Max: 30 * time.Second,
				Log: w.log, Msg: "cannot write Gateway API status, retrying", Failures: w.metrics.failures,
			}, func() error {
				// A retry reads the kinds watched now (a CRD removed
				// meanwhile takes its objects out of the round).
				w.follow(ctx)
				if !w.ready() {
					return nil
				}
				return w.sync(ctx)
			})
			if err != nil {
				return // ctx ended
			}
		}
	}
}

// follow makes the followed kinds the cluster's current informers of
// statusKinds; it returns the channel closed when they next change, and
// whether CRD discovery has run.
func (w *statusWriter) follow(ctx context.Context) (<-chan struct{}, bool) {
	want := make(map[schema.GroupKind]*kindHandler)
	w.c.mu.Lock()
	changed, discovered := w.c.changed, w.c.discovered
	for gvk, h := range w.c.handlers {
		if slices.Contains(statusKinds, gvk.GroupKind()) {
			want[gvk.GroupKind()] = h
		}
	}
	w.c.mu.Unlock()
	for gk, f := range w.kinds {
		if want[gk] != f.h {
			w.unfollow(gk)
		}
	}
	for gk, h := range want {
		if w.kinds[gk] != nil {
			continue
		}
		reg, err := h.informer.AddEventHandler(w.onChange)
		if err != nil { // stopped meanwhile: the next change says so
			w.log.Debug("cannot follow an informer", "kind", kindLabel(gk), "err", err)
			continue
		}
		kctx, cancel := context.WithCancel(ctx)
		w.kinds[gk] = &followed{h: h, gvr: h.gvk.GroupVersion().WithResource(h.resource), reg: reg, cancel: cancel}
		w.wg.Go(func() {
			if cache.WaitFor(kctx, "", reg.HasSyncedChecker()) {
				nudge(w.kick)
			}
		})
	}
	return changed, discovered
}

func (w *statusWriter) unfollow(gk schema.GroupKind) {
	f := w.kinds[gk]
	f.cancel()
	_ = f.h.informer.RemoveEventHandler(f.reg)
	delete(w.kinds, gk)
}

// ready reports whether a round may run: the routes and ReferenceGrants
// are watched (without them nothing would be written correctly), and every
// followed informer has delivered its objects to the writer.
func (w *statusWriter) ready() bool {
	if w.kinds[gkHTTPRoute] == nil || w.kinds[gkReferenceGrant] == nil {
		return false
	}
	for _, f := range w.kinds {
		if !f.reg.HasSynced() {
			return false
		}
	}
	return true
}

// listOf lists store; a nil store (a kind not watched) holds nothing.
func listOf(store cache.Store) []any {
	if store == nil {
		return nil
	}
	return store.List()
}

func nudge(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// store is the followed informer store of gk, nil when gk is not watched.
func (w *statusWriter) store(gk schema.GroupKind) cache.Store {
	if f := w.kinds[gk]; f != nil {
		return f.h.informer.GetStore()
	}
	return nil
}

// sync computes the status from the informer stores and writes every
// object whose status differs. It returns the write errors.
func (w *statusWriter) sync(ctx context.Context) error {
	in := gatewayapi.Input{DomainSuffix: w.domain, Namespaces: make(map[string]map[string]string)}
	gateways := decodeAll[gwv1.Gateway](w, gkGateway)
	httpRoutes := decodeAll[gwv1.HTTPRoute](w, gkHTTPRoute)
	grpcRoutes := decodeAll[gwv1.GRPCRoute](w, gkGRPCRoute)
	for _, o := range gateways {
		in.Gateways = append(in.Gateways, o.obj)
	}
	for _, o := range httpRoutes {
		in.HTTPRoutes = append(in.HTTPRoutes, o.obj)
	}
	for _, o := range grpcRoutes {
		in.GRPCRoutes = append(in.GRPCRoutes, o.obj)
	}
	for _, o := range decodeAll[gwv1beta1.ReferenceGrant](w, gkReferenceGrant) {
		in.ReferenceGrants = append(in.ReferenceGrants, o.obj)
	}
	for _, o := range decodeAll[serviceEntry](w, gkServiceEntry) {
		in.ServiceEntries = append(in.ServiceEntries, gatewayapi.ServiceEntry{Namespace: o.obj.Namespace, Name: o.obj.Name, Hosts: o.obj.Spec.Hosts})
	}
	for _, o := range listOf(w.store(gvkService.GroupKind())) {
		if m, err := apimeta.Accessor(o); err == nil {
			in.Services = append(in.Services, types.NamespacedName{Namespace: m.GetNamespace(), Name: m.GetName()})
		}
	}
	for _, o := range listOf(w.store(gvkNamespace.GroupKind())) {
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
			errs = append(errs, w.write(ctx, gkGateway, o.u, &want, gatewayapi.KindGateway))
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
		gk   schema.GroupKind
		objs map[string]decoded[gwv1.RouteStatus]
	}{
		{gatewayapi.KindHTTPRoute, gkHTTPRoute, routeStatuses(httpRoutes, func(r *gwv1.HTTPRoute) gwv1.RouteStatus { return r.Status.RouteStatus })},
		{gatewayapi.KindGRPCRoute, gkGRPCRoute, routeStatuses(grpcRoutes, func(r *gwv1.GRPCRoute) gwv1.RouteStatus { return r.Status.RouteStatus })},
	} {
		for _, o := range set.objs {
			ref := gatewayapi.Ref{Kind: set.kind, Namespace: o.u.GetNamespace(), Name: o.u.GetName()}
			want := mergeRouteStatus(*o.obj, ours[ref], now)
			if !equality.Semantic.DeepEqual(*o.obj, want) {
				errs = append(errs, w.write(ctx, set.gk, o.u, &want, set.kind))
			}
		}
	}
	return errors.Join(errs...)
}

// write replaces an object's status with status (a pointer to the
// status struct), at the version of gk the cluster watches: a conflict
// means a newer version is on its way, and the retry uses it.
func (w *statusWriter) write(ctx context.Context, gk schema.GroupKind, u *unstructured.Unstructured, status any, kind string) error {
	if !slices.Contains(StatusWriteKinds, gk) {
		return fmt.Errorf("write %s %s/%s status: %s is not in StatusWriteKinds", kind, u.GetNamespace(), u.GetName(), kindLabel(gk))
	}
	f := w.kinds[gk]
	if f == nil {
		return fmt.Errorf("write %s %s/%s status: the kind is no longer watched", kind, u.GetNamespace(), u.GetName())
	}
	gvr := f.gvr
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
