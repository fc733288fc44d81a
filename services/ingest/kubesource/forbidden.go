package kubesource

import (
	"k8s.io/client-go/tools/cache"
)

// A kind whose list the API server forbids (the source's RBAC lacks it,
// typically for a CRD kind) must not hold up the cluster: the initial sync
// waits for the other kinds and leaves the forbidden kind's records on the
// stream as they are (its objects are unknown, not gone). The kind is
// reported (an error log, pilotwire_ingest_kube_forbidden_kinds, the
// cluster's forbidden_kinds in /debug/clusterz) until client-go, which
// keeps retrying, lists it; it is then reconciled like a kind started
// after the initial sync (itemKindSynced).

// markForbidden records that h's kind was forbidden to list. The first
// time, it wakes waitInitial (which stops waiting for the kind) and starts
// a goroutine that clears the mark once the kind has listed, or its
// informer stopped.
func (c *cluster) markForbidden(h *kindHandler, kind string, err error) {
	c.mu.Lock()
	if _, ok := c.forbidden[h]; ok || h.ctx == nil || h.ctx.Err() != nil {
		c.mu.Unlock()
		return
	}
	c.forbidden[h] = kind
	c.handlersChangedLocked()
	c.mu.Unlock()
	c.src.metrics.forbidden.WithLabelValues(c.id, kind).Set(1)
	c.log.Error("listing a kind is forbidden; the cluster syncs without it and keeps its records on the stream until it lists (grant the source list and watch on it)",
		"kind", kind, "err", err)
	h.wg.Go(func() {
		listed := cache.WaitFor(h.ctx, "", h.reg.HasSyncedChecker())
		c.mu.Lock()
		delete(c.forbidden, h)
		initial := c.initial
		if !listed {
			c.handlersChangedLocked()
		}
		c.mu.Unlock()
		c.src.metrics.forbidden.DeleteLabelValues(c.id, kind)
		if !listed {
			return
		}
		c.log.Info("a kind forbidden before has listed", "kind", kind)
		if initial {
			// The initial sync went without it: reconcile it now.
			c.queue.Add(item{op: itemKindSynced, gvk: h.gvk})
		}
	})
}
