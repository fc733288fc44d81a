package ads

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// handleRequest applies one state-of-the-world request. Only a protocol
// violation ends the stream; the error is a gRPC status.
func (c *conn) handleRequest(req *discovery.DiscoveryRequest) error {
	if c.fixedType == "" && isDebugType(req.GetTypeUrl()) {
		a, err := c.handleDebug(req.GetTypeUrl(), req.GetResourceNames(), req.GetNode())
		if a == nil || err != nil {
			return err
		}
		return c.sendDebug(req.GetTypeUrl(), a)
	}
	if err := c.open(req.GetNode()); err != nil {
		return err
	}
	if c.fixedType == "" && req.GetTypeUrl() == resource.SecretType {
		return c.handleSDS(req)
	}
	t, err := c.requestType(req.GetTypeUrl())
	if t == "" || err != nil {
		return err
	}
	if err := c.checkNames(t, len(req.GetResourceNames())); err != nil {
		return err
	}
	w, seen := c.watches[t]
	if !seen {
		w = &watch{typeURL: t}
		c.watches[t] = w
	}
	nonce := req.GetResponseNonce()
	if !seen {
		// An initial request: a nonce (and error) from another stream, as
		// after a reconnect, says nothing about this one.
		nonce = ""
	}
	if stale, err := c.checkNonce(w, nonce); stale || err != nil {
		// An answer to an older response (the newer one is in flight), or
		// to one never sent.
		return err
	}
	old := w.names
	if nonce != "" && req.GetErrorDetail() != nil {
		// The names apply whatever the verdict: a NACK may subscribe to
		// more (a cluster that would otherwise never get endpoints).
		changed := w.setNames(req.GetResourceNames())
		c.subsChanged = c.subsChanged || changed || !seen
		c.nack(w, nonce, req.GetErrorDetail().GetMessage())
		if !changed {
			return c.answered(w)
		}
		return c.answerNames(w, old)
	}
	changed := w.setNames(req.GetResourceNames())
	c.subsChanged = c.subsChanged || changed || !seen
	if nonce != "" {
		c.ack(w, nonce, req.GetVersionInfo())
		if !changed && !w.alwaysRespond {
			return c.answered(w)
		}
		if changed && !w.alwaysRespond {
			return c.answerNames(w, old)
		}
		w.awaiting, w.deferred = false, false // the answer below is the latest state
	}
	// A new subscription, a reconnect, changed names, or a request that must
	// be answered (EDS after clusters changed): answer now from the model as
	// it is. A reconnecting client that already has the current version is
	// sent nothing (go-control-plane and Envoy agree on this).
	if nonce == "" && req.GetVersionInfo() != "" && !w.alwaysRespond {
		mesh := c.s.meshes.Snapshot()
		if r, err := c.s.build(mesh, c.proxy, w); err == nil && r.version == req.GetVersionInfo() {
			// Synced at the mesh compared against, not a later one.
			w.sentVersion, w.ackedVersion, w.genVersion, w.genSeq = r.version, r.version, r.version, mesh.Seq
			c.s.updateConn(c)
			return nil
		}
	}
	return c.answer(w)
}

// answerNames answers a change of names on a stream that was answered
// before. EDS and RDS are named subscriptions the client keeps: names it
// dropped are forgotten and nothing is sent for them, names it added are
// sent alone (with anything else that changed meanwhile). Other types get
// their whole set.
func (c *conn) answerNames(w *watch, old []string) error {
	w.awaiting, w.deferred = false, false // the answer below is the latest state
	if !incrementalSotW(w.typeURL) || !w.hasSent() || w.wildcard {
		return c.answer(w)
	}
	for n := range w.sentMap() {
		if _, ok := slices.BinarySearch(w.names, n); !ok {
			w.forgetSent(n)
		}
	}
	for _, n := range w.names {
		if _, ok := slices.BinarySearch(old, n); !ok {
			w.forgotten = true // added: not with the client, whatever sentRes says
			w.forgetSent(n)
		}
	}
	if _, err := c.respond(c.s.meshes.Snapshot(), w, false, 0); err != nil {
		return err
	}
	c.s.updateConn(c)
	return nil
}

// respond generates the type for the watch and sends it when it differs from
// what was last sent, or always when force (an answer to a request). A push
// of EDS or RDS carries only the resources that changed, as Istio's
// incremental EDS does; everything else carries the whole watched set. It
// reports whether it sent.
func (c *conn) respond(mesh *model.Mesh, w *watch, force bool, pushID uint64) (bool, error) {
	full, err := c.s.build(mesh, c.proxy, w)
	if err != nil {
		c.generateFailed(w, mesh, err)
		return false, nil
	}
	w.genSeq = mesh.Seq
	if !force && full.version == w.genVersion && !w.forgotten {
		return false, nil
	}
	r := full
	covered := false // narrowed from sentAs, whose names full all has
	if !force && incrementalSotW(w.typeURL) && w.hasSent() {
		var any bool
		if r, any, covered = w.narrow(full); !any {
			// Only removals: the client keeps what it has, which is
			// harmless; remember the new state (nothing was sent).
			w.genVersion = full.version
			return false, nil
		}
	}
	c.nonceSeq++
	nonce := c.id + "-" + strconv.FormatUint(c.nonceSeq, 36)
	resp := &sotwResponse{version: r.version, typeURL: w.typeURL, nonce: nonce, r: r}
	sendStart := time.Now()
	err = c.sendTimed(func() error { return c.sotw.SendMsg(resp) })
	c.s.metrics.sendTime.Observe(time.Since(sendStart).Seconds())
	c.s.metrics.configSize.WithLabelValues(shortType(w.typeURL)).Observe(float64(r.bytes))
	if err != nil {
		c.s.metrics.sendErrors.WithLabelValues(shortType(w.typeURL)).Inc()
		return false, fmt.Errorf("send %s to %s: %w", shortType(w.typeURL), c.proxy.ID, err)
	}
	w.nonce = nonce
	w.sentAt = time.Now()
	w.awaiting = true
	w.sentVersion, w.genVersion = r.version, full.version
	w.alwaysRespond, w.forgotten = false, false
	var changedClusters []string
	if w.typeURL == resource.ClusterType {
		changedClusters = r.changedSince(w.sentCDS)
		w.sentCDS = r
	}
	if incrementalSotW(w.typeURL) {
		if r == full || !w.hasSent() {
			w.sentWhole(full)
		} else {
			w.sentNarrowed(full, r, covered)
		}
	}
	c.clustersSent(changedClusters)
	c.s.metrics.pushes.WithLabelValues(shortType(w.typeURL)).Inc()
	c.s.metrics.responseBytes.WithLabelValues(shortType(w.typeURL)).Add(float64(r.bytes))
	c.s.recordResponse(c, w.typeURL, r, nonce, pushID)
	c.log.Debug("sent", "type", shortType(w.typeURL), "version", r.version, "resources", len(r.resources), "seq", mesh.Seq)
	return true, nil
}
