package ads

import (
	"slices"
	"time"

	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/pilotwire/pilotwire/pkg/model"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// answer responds to a request at once from the model as it is.
func (c *conn) answer(w *watch) error {
	mesh := c.s.meshes.Snapshot()
	var err error
	if c.delta != nil {
		_, err = c.respondDelta(mesh, w, true, 0)
	} else {
		_, err = c.respond(mesh, w, true, 0)
	}
	if err != nil {
		return err
	}
	c.refreshScope(mesh, false)
	c.s.updateConn(c)
	return nil
}

// dependsOn says which types a push of a type waits for (make before
// break, in Envoy's order): while the client has not answered a response of
// one of them, the type is held back. Load assignments and listeners name
// clusters; routes name clusters and belong to listeners. Without this, a
// route to a new cluster could reach Envoy before the cluster (503 NC).
var dependsOn = map[string][]string{
	resource.EndpointType: {resource.ClusterType},
	resource.ListenerType: {resource.ClusterType},
	resource.RouteType:    {resource.ClusterType, resource.ListenerType},
}

// heldBack reports whether a type w depends on awaits the client's answer.
func (c *conn) heldBack(w *watch) bool {
	for _, t := range dependsOn[w.typeURL] {
		if d, ok := c.watches[t]; ok && d.awaiting {
			return true
		}
	}
	return false
}

// push brings one watch up to date after a change. While the client has not
// answered the last response of the type, or of a type it depends on, the
// push is deferred: the answer sends the latest state (see answered).
func (c *conn) push(mesh *model.Mesh, w *watch, pushID uint64) (bool, error) {
	if w.awaiting || c.heldBack(w) {
		w.deferred = true
		c.s.metrics.deferred.WithLabelValues(shortType(w.typeURL)).Inc()
		return false, nil
	}
	start := time.Now()
	var sent bool
	var err error
	if c.delta != nil {
		sent, err = c.respondDelta(mesh, w, false, pushID)
	} else {
		sent, err = c.respond(mesh, w, false, pushID)
	}
	if sent {
		c.s.metrics.pushTime.WithLabelValues(shortType(w.typeURL)).Observe(time.Since(start).Seconds())
	}
	return sent, err
}

// answered notes the client's ACK or NACK of the last response and sends
// the deferred pushes that were waiting for it.
func (c *conn) answered(w *watch) error {
	w.awaiting = false
	return c.flushDeferred()
}

// flushDeferred sends, in push order, every deferred push that no longer
// waits for an answer. A type sent here holds back the types that depend
// on it until its own answer.
func (c *conn) flushDeferred() error {
	var mesh *model.Mesh
	sent := false
	var err error
	for _, t := range pushOrder {
		w, ok := c.watches[t]
		if !ok || !w.deferred || w.awaiting || c.heldBack(w) {
			continue
		}
		w.deferred = false
		if mesh == nil {
			mesh = c.s.meshes.Snapshot()
		}
		var did bool
		if did, err = c.push(mesh, w, 0); err != nil {
			break
		}
		sent = sent || did
	}
	if sent {
		c.s.updateConn(c)
	}
	return err
}

// ack records that the client applied the last response of w's type.
func (c *conn) ack(w *watch, nonce, version string) {
	c.releaseAdmission()
	nacked := w.nackError != ""
	w.nackError = "" // whatever the version: the client took the last response
	if w.ackedVersion == version {
		if nacked {
			c.s.updateConn(c)
		}
		return
	}
	w.ackedVersion = version
	w.ackedAt = time.Now()
	c.s.record(c, pb.DeliveryRecord_ACK, w.typeURL, version, nonce, nil, 0, "")
	c.s.updateConn(c)
}

// nack records and counts a rejection. It is never answered with the same
// config; the next change is sent as usual.
func (c *conn) nack(w *watch, nonce, msg string) {
	c.releaseAdmission()
	if w.nackedNonce == nonce {
		// The same rejection again (a NACK storm): said once is enough.
		c.s.metrics.badRequests.WithLabelValues("repeated_nack").Inc()
		return
	}
	w.nackedNonce = nonce
	w.nackError = msg
	c.s.metrics.rejects.WithLabelValues(shortType(w.typeURL)).Inc()
	c.log.Warn("config rejected", "type", shortType(w.typeURL), "version", w.sentVersion, "nonce", nonce, "err", msg)
	c.s.record(c, pb.DeliveryRecord_NACK, w.typeURL, w.sentVersion, nonce, nil, 0, msg)
	c.s.updateConn(c)
}

// clustersSent is told which clusters a CDS response just added or changed.
// Envoy warms each of them and waits for its load assignment, even one that
// did not change: the watch's EDS forgets that the client has them, so the
// next EDS response (the rest of this push, or the answer to the client's
// ACK) carries them again, and its next EDS request is answered even when it
// looks like an ACK (envoy#13009; Istio's AlwaysRespond).
func (c *conn) clustersSent(names []string) {
	eds, ok := c.watches[resource.EndpointType]
	if !ok || len(names) == 0 {
		return
	}
	eds.alwaysRespond = true
	for _, n := range names {
		if eds.known != nil {
			delete(eds.known, n)
		}
		if eds.forgetSent(n) {
			eds.forgotten = true
		}
	}
}

// countOrderSeqs counts orders that are not newer than the connection's
// last one: an older through_seq is a PushRequest that reached the
// connection after a newer one (reordered), an equal one a PushRequest
// ordered again (a resync or catch-up after a lost done, or a duplicate).
// Both are harmless here, since a push generates from the whole model,
// but they show upstream ordering (the fault matrix reads them).
func (c *conn) countOrderSeqs(orders []orderRef) {
	for _, o := range orders {
		seq := o.order.GetThroughSeq()
		switch {
		case seq == 0:
			continue
		case seq < c.orderSeq:
			c.s.metrics.orderSeqs.WithLabelValues("older").Inc()
		case seq == c.orderSeq:
			c.s.metrics.orderSeqs.WithLabelValues("repeated").Inc()
		}
		c.orderSeq = max(c.orderSeq, seq)
	}
}

// handleOrders brings every watched type up to date with the model (which
// has applied every order's through_seq: the dispatcher waited for it) and
// reports each order done.
func (c *conn) handleOrders(orders []orderRef) error {
	if len(orders) == 0 {
		return nil
	}
	mesh := c.s.meshes.Snapshot()
	var pushID uint64
	for _, o := range orders {
		pushID = max(pushID, o.order.GetPushId())
	}
	c.countOrderSeqs(orders)
	sent, deferred := false, false
	var sendErr error
	for _, t := range pushOrder {
		w, ok := c.watches[t]
		if !ok {
			continue
		}
		did, err := c.push(mesh, w, pushID)
		if err != nil {
			sendErr = err
			break
		}
		sent = sent || did
		deferred = deferred || w.deferred
	}
	if sent {
		var start time.Time
		for _, o := range orders {
			if st := o.order.GetStart(); st != nil && (start.IsZero() || st.AsTime().Before(start)) {
				start = st.AsTime()
			}
		}
		if !start.IsZero() {
			c.s.metrics.convergence.Observe(time.Since(start).Seconds())
		}
	}
	res := pb.PushDone_UNCHANGED
	errText := ""
	switch {
	case sendErr != nil:
		res = pb.PushDone_FAILED
		errText = sendErr.Error()
	case sent:
		res = pb.PushDone_SENT
	case deferred:
		res = pb.PushDone_DEFERRED
	}
	synced := c.syncedSeq()
	for _, o := range orders {
		c.s.reports.done(o, res, synced, errText)
	}
	if sendErr == nil {
		// The pusher distrusts the scope after a push that may change it
		// until an entry computed at least that late comes.
		c.refreshScope(mesh, slices.ContainsFunc(orders, func(o orderRef) bool { return scopeChanging(o.order) }))
	}
	if sent || c.subsChanged {
		c.s.updateConn(c)
	}
	return sendErr
}

// releaseAdmission frees the stream's admission slot at its first answer
// to a response: the frontend has served its first exchange.
func (c *conn) releaseAdmission() {
	if c.admitted != nil {
		c.admitted()
		c.admitted = nil
	}
}
