package ads

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/pilotwire/pilotwire/pkg/model"
	"github.com/pilotwire/pilotwire/pkg/xdsgen"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// absent marks, in a delta watch's known versions, a name the client was
// told does not exist.
const absent = ""

// handleDelta applies one incremental xDS request. Subscription changes
// apply whatever the nonce; ACK and NACK only for the last nonce sent.
func (c *conn) handleDelta(req *discovery.DeltaDiscoveryRequest) error {
	if c.fixedType == "" && isDebugType(req.GetTypeUrl()) {
		a, err := c.handleDebug(req.GetTypeUrl(), req.GetResourceNamesSubscribe(), req.GetNode())
		if a == nil || err != nil {
			return err
		}
		return c.sendDeltaDebug(req.GetTypeUrl(), a)
	}
	if err := c.open(req.GetNode()); err != nil {
		return err
	}
	if c.fixedType == "" && req.GetTypeUrl() == resource.SecretType {
		return c.handleDeltaSDS(req)
	}
	t, err := c.requestType(req.GetTypeUrl())
	if t == "" || err != nil {
		return err
	}
	if err := c.checkNames(t, max(len(req.GetResourceNamesSubscribe()), len(req.GetInitialResourceVersions()))); err != nil {
		return err
	}
	w, seen := c.watches[t]
	if !seen {
		w = &watch{typeURL: t, known: make(map[string]string), subscribed: make(map[string]bool)}
		c.watches[t] = w
		// A reconnecting client says what it has: only differences are sent.
		for name, v := range req.GetInitialResourceVersions() {
			w.known[name] = v
		}
	}
	if nonce := req.GetResponseNonce(); nonce != "" {
		stale := !seen // a first request's nonce is from an older stream
		if seen {
			if stale, err = c.checkNonce(w, nonce); err != nil {
				return err
			}
		} else {
			c.s.metrics.expiredNonce.WithLabelValues(shortType(t)).Inc()
		}
		switch {
		case stale:
		case req.GetErrorDetail() != nil:
			c.nack(w, nonce, req.GetErrorDetail().GetMessage())
			w.awaiting = false
		default:
			c.ack(w, nonce, w.sentVersion)
			w.awaiting = false
		}
	}
	changed, resend := w.applyDelta(req.GetResourceNamesSubscribe(), req.GetResourceNamesUnsubscribe(), !seen)
	if err := c.checkNames(t, len(w.subscribed)); err != nil {
		return err
	}
	c.subsChanged = c.subsChanged || changed || !seen
	if !changed && !resend && seen && !w.alwaysRespond {
		return c.flushDeferred() // what the answer above released
	}
	w.deferred = false // the answer below is the latest state
	return c.answer(w)
}

// applyDelta applies subscribe and unsubscribe lists and reports whether
// the subscription changed, and whether a resource the client was believed
// to have must be sent again.
func (w *watch) applyDelta(sub, unsub []string, first bool) (changed, resend bool) {
	if first && len(sub) == 0 && wildcardDefault(w.typeURL) {
		w.wildcard, changed = true, true
	}
	for _, n := range sub {
		if n == "*" {
			changed = changed || !w.wildcard
			w.wildcard = true
			continue
		}
		if !w.subscribed[n] {
			w.subscribed[n] = true
			changed = true
		}
		if !first {
			// A subscribe asks for the resource whatever the server believes
			// the client has (initial_resource_versions on the first request
			// say what it has).
			if _, had := w.known[n]; had {
				delete(w.known, n)
				resend = true
			}
		}
	}
	for _, n := range unsub {
		if n == "*" {
			changed = changed || w.wildcard
			w.wildcard = false
			continue
		}
		if w.subscribed[n] {
			delete(w.subscribed, n)
			changed = true
		}
		// The client forgets what it unsubscribed from.
		delete(w.known, n)
	}
	if changed {
		// A new slice: the published ConnectionInfo may share the old one.
		w.names = slices.Sorted(maps.Keys(w.subscribed))
		w.nameKey = ""
	}
	return changed, resend
}

// respondDelta sends the resources whose version differs from what the
// client has, and the removal of those it has that are gone. force sends a
// response even when nothing differs (an answer to a subscription change).
func (c *conn) respondDelta(mesh *model.Mesh, w *watch, force bool, pushID uint64) (bool, error) {
	set, err := c.s.generate(mesh, c.proxy, w.typeURL)
	if err != nil {
		c.generateFailed(w, mesh, err)
		return false, nil
	}
	w.genSeq = mesh.Seq
	var want []*xdsgen.Resource
	if w.wildcard {
		// set.Resources is shared by every connection: append to a copy.
		want = slices.Clip(set.Resources)
		for _, n := range w.names {
			if set.Get(n) == nil {
				want = append(want, &xdsgen.Resource{Name: n}) // subscribed, missing
			}
		}
	} else {
		for _, n := range w.names {
			if r := set.Get(n); r != nil {
				want = append(want, r)
			} else {
				want = append(want, &xdsgen.Resource{Name: n})
			}
		}
	}
	var (
		send    []*discovery.Resource
		removed []string
		bytes   int
		present []*xdsgen.Resource
	)
	inWant := make(map[string]bool, len(want))
	for _, r := range want {
		inWant[r.Name] = true
		if r.Any == nil {
			// Subscribed but does not exist: say so once.
			if v, ok := w.known[r.Name]; !ok || v != absent {
				removed = append(removed, r.Name)
			}
			continue
		}
		present = append(present, r)
		if w.known[r.Name] == r.Version {
			continue
		}
		send = append(send, &discovery.Resource{Name: r.Name, Version: r.Version, Resource: r.Any})
		bytes += len(r.Any.GetValue())
	}
	for n := range w.known {
		if !inWant[n] {
			removed = append(removed, n) // the client has it; it is gone
		}
	}
	slices.Sort(removed)
	version := xdsgen.VersionOf(present)
	if len(send) == 0 && len(removed) == 0 && !force {
		w.genVersion = version // nothing sent: sentVersion stays what was
		return false, nil
	}
	c.nonceSeq++
	nonce := c.id + "-" + strconv.FormatUint(c.nonceSeq, 36)
	resp := &discovery.DeltaDiscoveryResponse{
		SystemVersionInfo: version,
		Resources:         send,
		RemovedResources:  removed,
		TypeUrl:           w.typeURL,
		Nonce:             nonce,
	}
	sendStart := time.Now()
	err = c.sendTimed(func() error { return c.delta.Send(resp) })
	c.s.metrics.sendTime.Observe(time.Since(sendStart).Seconds())
	c.s.metrics.configSize.WithLabelValues(shortType(w.typeURL)).Observe(float64(bytes))
	if err != nil {
		c.s.metrics.sendErrors.WithLabelValues(shortType(w.typeURL)).Inc()
		return false, fmt.Errorf("send delta %s to %s: %w", shortType(w.typeURL), c.proxy.ID, err)
	}
	// Track what the client now has, as sent (a NACK keeps it: the same
	// versions are not sent again).
	names := make([]string, 0, len(send))
	for _, r := range send {
		w.known[r.GetName()] = r.GetVersion()
		names = append(names, r.GetName())
	}
	for _, n := range removed {
		if w.subscribed[n] {
			w.known[n] = absent
		} else {
			delete(w.known, n)
		}
	}
	w.nonce = nonce
	w.sentAt = time.Now()
	w.awaiting = true
	w.sentVersion, w.genVersion = version, version
	w.alwaysRespond = false
	if w.typeURL == resource.ClusterType {
		c.clustersSent(names)
	}
	c.s.metrics.pushes.WithLabelValues(shortType(w.typeURL)).Inc()
	c.s.metrics.responseBytes.WithLabelValues(shortType(w.typeURL)).Add(float64(bytes))
	c.s.record(c, pb.DeliveryRecord_RESPONSE, w.typeURL, version, nonce, names, pushID, "")
	return len(send) > 0 || len(removed) > 0, nil
}
