package kubesource

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

// maxBatch bounds the keys handed to the publisher in one Apply: enough
// to pipeline publishes after a burst, small enough to keep latency low.
const maxBatch = 256

// work publishes queued items until the queue shuts down.
func (c *cluster) work(ctx context.Context) {
	processed := c.src.metrics.processed.WithLabelValues(c.id)
	batch := make([]item, 0, maxBatch)
	for {
		it, shutdown := c.queue.Get()
		if shutdown {
			return
		}
		batch = append(batch[:0], it)
		// This is the queue's only consumer: while it has items, Get does
		// not block.
		for len(batch) < maxBatch && c.queue.Len() > 0 {
			it, shutdown := c.queue.Get()
			if shutdown {
				break
			}
			batch = append(batch, it)
		}
		err := c.process(ctx, batch)
		for _, it := range batch {
			c.queue.Done(it)
		}
		processed.Add(float64(len(batch)))
		if err != nil {
			return // ctx ended
		}
	}
}

// process publishes a batch of items in order. The only error is ctx's.
func (c *cluster) process(ctx context.Context, batch []item) error {
	var changes []publish.Change
	flush := func() error {
		if len(changes) == 0 {
			return nil
		}
		res, err := c.sink.Apply(ctx, changes...)
		if err != nil {
			return err
		}
		if res.Published > 0 || res.Rejected > 0 {
			c.log.Debug("changes published", "changes", len(changes), "published", res.Published,
				"unchanged", res.Unchanged, "deduplicated", res.Deduplicated, "rejected", res.Rejected)
		}
		changes = changes[:0]
		return nil
	}
	for _, it := range batch {
		switch it.op {
		case itemObject:
			if ch, ok := c.objectChange(it); ok {
				changes = append(changes, ch)
			}
		case itemKindSynced:
			if err := flush(); err != nil {
				return err
			}
			if err := c.syncKind(ctx, it.gvk); err != nil {
				return err
			}
		case itemKindGone:
			if err := flush(); err != nil {
				return err
			}
			if err := c.dropKind(ctx, it.gvk); err != nil {
				return err
			}
		}
	}
	return flush()
}

// objectChange reads the object's current state from its informer: present
// is an upsert, absent a delete. An item of a kind no longer watched is
// dropped (the kind's stop deletes its objects).
func (c *cluster) objectChange(it item) (publish.Change, bool) {
	h := c.handler(it.gvk)
	if h == nil {
		return publish.Change{}, false
	}
	key := publish.Key{Group: it.gvk.Group, Kind: it.gvk.Kind, Namespace: it.namespace, Name: it.name}
	storeKey := it.name
	if it.namespace != "" {
		storeKey = it.namespace + "/" + it.name
	}
	obj, exists, err := h.informer.GetStore().GetByKey(storeKey)
	if err != nil {
		// Not knowing is not "gone": publish nothing rather than a delete.
		c.src.metrics.errors.WithLabelValues(c.id, errStore).Inc()
		c.log.Error("cannot read an object from the informer cache; skipping it", "kind", kindLabel(it.gvk.GroupKind()), "key", storeKey, "err", err)
		return publish.Change{}, false
	}
	if !exists {
		return publish.Delete(publish.Object{Key: key, Version: it.gvk.Version, Source: c.source()}), true
	}
	o, err := c.toObject(it.gvk, obj)
	if err != nil {
		c.encodeError(it.gvk, err)
		return publish.Change{}, false
	}
	return publish.Upsert(o), true
}

// current is the informer's view of an object, for the publisher to plan
// after a conflict (publish.Options.Reread): an upsert, a delete, or
// nothing if the kind is not watched or the cache cannot say.
func (c *cluster) current(k publish.Key) (publish.Change, bool) {
	c.mu.Lock()
	var gvk schema.GroupVersionKind
	found := false
	for g := range c.handlers {
		if g.Group == k.Group && g.Kind == k.Kind {
			gvk, found = g, true
			break
		}
	}
	c.mu.Unlock()
	if !found {
		return publish.Change{}, false
	}
	return c.objectChange(item{op: itemObject, gvk: gvk, namespace: k.Namespace, name: k.Name})
}

// syncKind makes the stream hold exactly the informer's objects of one
// kind: upserts for what it has, deletes for live objects it lacks.
func (c *cluster) syncKind(ctx context.Context, gvk schema.GroupVersionKind) error {
	h := c.handler(gvk)
	if h == nil {
		return nil
	}
	have := make(map[publish.Key]struct{})
	var changes []publish.Change
	for _, obj := range h.informer.GetStore().List() {
		o, err := c.toObject(gvk, obj)
		if err != nil {
			c.encodeError(gvk, err)
			continue
		}
		have[o.Key] = struct{}{}
		changes = append(changes, publish.Upsert(o))
	}
	for _, l := range c.sink.Live() {
		if _, ok := have[l.Key]; !ok && l.Key.Group == gvk.Group && l.Key.Kind == gvk.Kind {
			changes = append(changes, publish.Delete(publish.Object{Key: l.Key}))
		}
	}
	res, err := c.sink.Apply(ctx, changes...)
	if err != nil {
		return err
	}
	c.log.Info("kind synced", "kind", kindLabel(gvk.GroupKind()), "objects", len(have), "published", res.Published, "unchanged", res.Unchanged)
	return nil
}

// dropKind deletes a kind's objects from the stream once it is no longer
// watched, unless the same kind is watched at another version.
func (c *cluster) dropKind(ctx context.Context, gvk schema.GroupVersionKind) error {
	c.mu.Lock()
	for other := range c.handlers {
		if other.GroupKind() == gvk.GroupKind() {
			c.mu.Unlock()
			return nil
		}
	}
	c.mu.Unlock()
	var changes []publish.Change
	for _, l := range c.sink.Live() {
		if l.Key.Group == gvk.Group && l.Key.Kind == gvk.Kind {
			changes = append(changes, publish.Delete(publish.Object{Key: l.Key}))
		}
	}
	if len(changes) == 0 {
		return nil
	}
	res, err := c.sink.Apply(ctx, changes...)
	if err != nil {
		return err
	}
	c.log.Info("deleted the objects of a kind no longer watched", "kind", kindLabel(gvk.GroupKind()), "published", res.Published)
	return nil
}

// toObject turns a stored (transformed) object into the publisher's form.
func (c *cluster) toObject(gvk schema.GroupVersionKind, obj any) (publish.Object, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return publish.Object{}, err
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return publish.Object{}, fmt.Errorf("%s %s/%s: %w", kindLabel(gvk.GroupKind()), m.GetNamespace(), m.GetName(), err)
	}
	content, err := contentVersion(obj, data)
	if err != nil {
		return publish.Object{}, fmt.Errorf("%s %s/%s: %w", kindLabel(gvk.GroupKind()), m.GetNamespace(), m.GetName(), err)
	}
	return publish.Object{
		Key:             publish.Key{Group: gvk.Group, Kind: gvk.Kind, Namespace: m.GetNamespace(), Name: m.GetName()},
		Version:         gvk.Version,
		UID:             string(m.GetUID()),
		ResourceVersion: m.GetResourceVersion(),
		ContentVersion:  content,
		JSON:            data,
		Source:          c.source(),
	}, nil
}

// contentVersion is the publish.ContentVersion of a trimmed kind's record
// without its resourceVersion, or "" for kinds kept whole. Pods and Nodes
// are written often in fields the record drops (container statuses,
// heartbeats): their resourceVersion moves while the record stays the same.
// The informer sees that as unchanged (see unchanged); the content version
// lets the publisher see it too after a restart, when the informer has
// nothing older to compare with. data is obj's JSON: the version is of
// those bytes without the resourceVersion member, which are the bytes
// json.Marshal writes for obj with the field blank. When the member cannot
// be cut out of data, obj is marshalled again that way. The stored object
// is shared: it is copied (shallowly, to blank one field), never changed.
func contentVersion(obj any, data []byte) (string, error) {
	var rv string
	var blank func() any // obj with its resourceVersion blank
	switch o := obj.(type) {
	case *corev1.Pod:
		rv, blank = o.ResourceVersion, func() any { cp := *o; cp.ResourceVersion = ""; return &cp }
	case *corev1.Node:
		rv, blank = o.ResourceVersion, func() any { cp := *o; cp.ResourceVersion = ""; return &cp }
	default:
		return "", nil
	}
	if cut, ok := withoutResourceVersion(data, rv); ok {
		return publish.ContentVersion(cut), nil
	}
	again, err := json.Marshal(blank())
	if err != nil {
		return "", err
	}
	return publish.ContentVersion(again), nil
}

// withoutResourceVersion returns data, the JSON of a Pod or Node whose
// resourceVersion is rv, without its metadata's resourceVersion member; ok
// is false when the member is not found as json.Marshal writes it. The
// first match is the metadata's member: encoding/json writes the type's
// kind and apiVersion, then the metadata's name, generateName, namespace,
// selfLink and uid before it, all strings, in which every quote is escaped,
// and everything else after it. rv must need no escaping to be matched.
func withoutResourceVersion(data []byte, rv string) ([]byte, bool) {
	if rv == "" {
		return data, true // omitempty: there is no member
	}
	for i := 0; i < len(rv); i++ {
		if c := rv[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return nil, false
		}
	}
	member := make([]byte, 0, len(`"resourceVersion":""`)+len(rv))
	member = append(append(append(member, `"resourceVersion":"`...), rv...), '"')
	i := bytes.Index(data, member)
	if i <= 0 {
		return nil, false
	}
	lo, hi := i, i+len(member)
	switch {
	case data[i-1] == ',':
		lo-- // the comma before it
	case data[i-1] == '{' && hi < len(data) && data[hi] == ',':
		hi++ // the first member: the comma after it
	case data[i-1] == '{' && hi < len(data) && data[hi] == '}':
	default:
		return nil, false
	}
	out := make([]byte, 0, len(data)-(hi-lo))
	return append(append(out, data[:lo]...), data[hi:]...), true
}

// source is the records' source field: "kube:<origin>".
func (c *cluster) source() string { return "kube:" + c.origin }

func (c *cluster) encodeError(gvk schema.GroupVersionKind, err error) {
	c.src.metrics.errors.WithLabelValues(c.id, errEncode).Inc()
	c.log.Error("cannot encode an object; skipping it", "kind", kindLabel(gvk.GroupKind()), "err", err)
}
