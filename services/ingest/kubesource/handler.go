package kubesource

import (
	"context"
	"errors"
	"io"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// item is one unit of work in a cluster's queue. Items are comparable, so
// the queue holds each at most once: a burst of events on one object is
// one item.
type item struct {
	op        itemOp
	gvk       schema.GroupVersionKind
	namespace string
	name      string
}

type itemOp uint8

const (
	// itemObject: publish the object's current state (or its delete).
	itemObject itemOp = iota
	// itemKindSynced: a kind started after the cluster's initial sync has
	// listed; make the stream hold exactly its objects.
	itemKindSynced
	// itemKindGone: a kind is no longer watched (its CRD was removed);
	// delete its objects from the stream.
	itemKindGone
)

// kindHandler is the informer and event handler of one kind of one
// cluster. The handler only enqueues.
type kindHandler struct {
	// set at construction
	gvk      schema.GroupVersionKind
	resource string // plural, for CRD kinds
	crd      bool   // started and stopped by discovery
	informer cache.SharedIndexInformer
	reg      cache.ResourceEventHandlerRegistration
	// event counters, by event label
	added, updated, deleted, unchanged prometheus.Counter

	// set by start
	cancel context.CancelFunc
	ctx    context.Context
	wg     *sync.WaitGroup
}

// newKindHandler wires informer to c's queue. It must be called before the
// informer runs.
func (c *cluster) newKindHandler(gvk schema.GroupVersionKind, informer cache.SharedIndexInformer, crd bool) (*kindHandler, error) {
	label := kindLabel(gvk.GroupKind())
	ev := c.src.metrics.events
	h := &kindHandler{
		gvk:       gvk,
		crd:       crd,
		informer:  informer,
		added:     ev.WithLabelValues(c.id, label, eventAdd),
		updated:   ev.WithLabelValues(c.id, label, eventUpdate),
		deleted:   ev.WithLabelValues(c.id, label, eventDelete),
		unchanged: ev.WithLabelValues(c.id, label, eventUnchanged),
	}
	if err := informer.SetTransform(transformFor(gvk)); err != nil {
		return nil, err
	}
	if err := informer.SetWatchErrorHandlerWithContext(c.kindWatchErrorHandler(h, label)); err != nil {
		return nil, err
	}
	reg, err := informer.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, isInInitialList bool) {
			h.added.Inc()
			if isInInitialList {
				// The initial list reaches the publisher as a whole: the
				// cluster's initial Sync, or the reconcile of a kind
				// started later (itemKindSynced). Queuing each object
				// too would only re-check it.
				return
			}
			c.enqueue(gvk, obj)
		},
		UpdateFunc: func(oldObj, newObj any) {
			o, ok1 := oldObj.(runtime.Object)
			n, ok2 := newObj.(runtime.Object)
			if ok1 && ok2 && unchanged(o, n) {
				// A resync or relist (same resourceVersion), or a write
				// the record would not show: nothing to publish.
				h.unchanged.Inc()
				return
			}
			h.updated.Inc()
			c.enqueue(gvk, newObj)
		},
		DeleteFunc: func(obj any) {
			h.deleted.Inc()
			c.enqueue(gvk, obj)
		},
	})
	if err != nil {
		return nil, err
	}
	h.reg = reg
	return h, nil
}

// unchanged reports an update that needs no record.
func unchanged(o, n runtime.Object) bool {
	om, err1 := meta.Accessor(o)
	nm, err2 := meta.Accessor(n)
	if err1 != nil || err2 != nil {
		return false
	}
	if om.GetResourceVersion() == nm.GetResourceVersion() {
		return true
	}
	return om.GetUID() == nm.GetUID() && sameExceptResourceVersion(o, n)
}

// start runs the informer until ctx ends or stop is called; wg tracks it.
func (h *kindHandler) start(ctx context.Context, wg *sync.WaitGroup) {
	h.ctx, h.cancel = context.WithCancel(ctx)
	h.wg = wg
	wg.Go(func() { h.informer.RunWithContext(h.ctx) })
}

// stop ends the informer; the goroutine exits shortly after.
func (h *kindHandler) stop() {
	if h.cancel != nil {
		h.cancel()
	}
}

// enqueue queues the object's key; obj may be a deletion tombstone.
func (c *cluster) enqueue(gvk schema.GroupVersionKind, obj any) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		c.log.Warn("cannot key an informer object; ignoring it", "kind", kindLabel(gvk.GroupKind()), "err", err)
		return
	}
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		c.log.Warn("cannot split an informer key; ignoring it", "kind", kindLabel(gvk.GroupKind()), "key", key, "err", err)
		return
	}
	c.queue.Add(item{op: itemObject, gvk: gvk, namespace: ns, name: name})
}

// kindWatchErrorHandler is watchErrorHandler for a kind's informer; a list
// the API server forbids (RBAC) also marks the kind forbidden until it
// lists (see markForbidden).
func (c *cluster) kindWatchErrorHandler(h *kindHandler, kind string) cache.WatchErrorHandlerWithContext {
	logErr := c.watchErrorHandler(kind)
	return func(ctx context.Context, r *cache.Reflector, err error) {
		if ctx.Err() == nil && apierrors.IsForbidden(err) {
			c.markForbidden(h, kind, err)
		}
		logErr(ctx, r, err)
	}
}

// watchErrorHandler logs and counts list/watch failures; client-go
// retries them with backoff.
func (c *cluster) watchErrorHandler(kind string) cache.WatchErrorHandlerWithContext {
	errs := c.src.metrics.errors.WithLabelValues(c.id, errWatch)
	return func(ctx context.Context, r *cache.Reflector, err error) {
		switch {
		case ctx.Err() != nil, errors.Is(err, io.EOF):
			return // stopping, or a watch that ended normally
		case apierrors.IsResourceExpired(err) || apierrors.IsGone(err), errors.Is(err, io.ErrUnexpectedEOF):
			// The watch ended; client-go relists or rewatches.
			c.log.Debug("watch closed", "kind", kind, "err", err)
			return
		}
		errs.Inc()
		c.setLastError(kind + ": " + err.Error())
		c.log.Warn("list/watch failed; client-go retries", "kind", kind, "err", err)
	}
}
