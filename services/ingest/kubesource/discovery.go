package kubesource

import (
	"context"
	"sync"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsinformers "k8s.io/apiextensions-apiserver/pkg/client/informers/externalversions/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// crdWatch is what discovery decided to watch for one installed CRD.
type crdWatch struct {
	gvk      schema.GroupVersionKind
	resource string
}

// startDiscovery starts the CRD informer and the discovery loop, which
// starts and stops the informers of CRD-backed kinds as CRDs come and go.
func (c *cluster) startDiscovery(ctx context.Context, cl clients, wg *sync.WaitGroup) error {
	inf := apiextensionsinformers.NewCustomResourceDefinitionInformer(cl.ext, 0, cache.Indexers{})
	if err := inf.SetTransform(trimCRD); err != nil {
		return err
	}
	if err := inf.SetWatchErrorHandlerWithContext(c.watchErrorHandler("CustomResourceDefinition.apiextensions.k8s.io")); err != nil {
		return err
	}
	kick := func(any) {
		select {
		case c.kick <- struct{}{}:
		default: // a reconcile is already due
		}
	}
	reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    kick,
		UpdateFunc: func(_, n any) { kick(n) },
		DeleteFunc: kick,
	})
	if err != nil {
		return err
	}
	wg.Go(func() { inf.RunWithContext(ctx) })
	wg.Go(func() {
		if !cache.WaitFor(ctx, "", reg.HasSyncedChecker()) {
			return
		}
		want := crdKinds(c.src.opts.EnableGatewayAPI)
		for {
			c.reconcileCRDs(ctx, inf.GetStore().List(), want, cl.dyn, wg)
			select {
			case <-ctx.Done():
				return
			case <-c.kick:
			}
		}
	})
	return nil
}

// reconcileCRDs makes the running CRD-kind informers match the installed,
// established CRDs of the kinds in want: it starts informers for new kinds
// (or a new preferred version) and stops those whose CRD is gone. A stopped
// kind's objects get delete records (itemKindGone); a kind started after
// the initial sync is reconciled with the stream once listed
// (itemKindSynced).
func (c *cluster) reconcileCRDs(ctx context.Context, crds []any, want map[schema.GroupKind]struct{}, dyn dynamic.Interface, wg *sync.WaitGroup) {
	installed := make(map[schema.GroupKind]crdWatch)
	for _, obj := range crds {
		crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
		if !ok {
			continue
		}
		gk := schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}
		if _, ok := want[gk]; !ok || !established(crd) {
			continue
		}
		v := preferredVersion(crd)
		if v == "" {
			continue
		}
		installed[gk] = crdWatch{gvk: gk.WithVersion(v), resource: crd.Spec.Names.Plural}
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	changed := !c.discovered
	c.discovered = true
	for gvk, h := range c.handlers {
		if !h.crd {
			continue
		}
		if w, ok := installed[gvk.GroupKind()]; ok && w.gvk == gvk && w.resource == h.resource {
			continue
		}
		h.stop()
		delete(c.handlers, gvk)
		c.queue.Add(item{op: itemKindGone, gvk: gvk})
		changed = true
		c.log.Info("stopped watching a kind: its CRD is gone", "kind", kindLabel(gvk.GroupKind()), "version", gvk.Version)
	}
	for _, w := range installed {
		if _, ok := c.handlers[w.gvk]; ok {
			continue
		}
		gvr := w.gvk.GroupVersion().WithResource(w.resource)
		inf := dynamicinformer.NewFilteredDynamicInformer(dyn, gvr, metav1.NamespaceAll, c.src.opts.ResyncPeriod, cache.Indexers{}, nil).Informer()
		h, err := c.newKindHandler(w.gvk, inf, true)
		if err != nil {
			c.log.Error("cannot watch a kind", "kind", kindLabel(w.gvk.GroupKind()), "err", err)
			continue
		}
		h.resource = w.resource
		c.handlers[w.gvk] = h
		h.start(ctx, wg)
		changed = true
		c.log.Info("watching a kind: its CRD is installed", "kind", kindLabel(w.gvk.GroupKind()), "version", w.gvk.Version)
		if c.initial {
			// The initial sync is past: once listed, reconcile the whole
			// kind with the stream (objects deleted while it was not
			// watched get their delete).
			wg.Go(func() {
				if cache.WaitFor(h.ctx, "", h.reg.HasSyncedChecker()) {
					c.queue.Add(item{op: itemKindSynced, gvk: w.gvk})
				}
			})
		}
	}
	if changed {
		c.handlersChangedLocked()
	}
}

// established reports whether the CRD's Established condition is true:
// before that its resources cannot be listed.
func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, cond := range crd.Status.Conditions {
		if cond.Type == apiextensionsv1.Established {
			return cond.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}

// preferredVersion is the served version Kubernetes discovery would prefer:
// GA over beta over alpha, then the highest number ("" if none is served).
func preferredVersion(crd *apiextensionsv1.CustomResourceDefinition) string {
	best := ""
	for _, v := range crd.Spec.Versions {
		if v.Served && (best == "" || version.CompareKubeAwareVersionStrings(v.Name, best) > 0) {
			best = v.Name
		}
	}
	return best
}
