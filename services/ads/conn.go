package ads

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pilotwire/pilotwire/pkg/model"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

type sotwStream = grpc.BidiStreamingServer[discovery.DiscoveryRequest, discovery.DiscoveryResponse]

type deltaStream = grpc.BidiStreamingServer[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]

// orderRef is a push order waiting for a connection's loop, with the subject
// its completion goes to.
type orderRef struct {
	order *pb.PushOrder
	reply string
}

// conn is one xDS stream: state of the world or delta, aggregated (ADS) or
// for one type (fixedType).
type conn struct {
	// set at construction
	id        string
	s         *Server
	ctx       context.Context
	sotw      sotwStream  // nil on a delta stream
	delta     deltaStream // nil on a state-of-the-world stream
	fixedType string      // type of a per-type service; "" on ADS
	peer      string
	connected time.Time
	log       *slog.Logger
	notify    chan struct{} // cap 1: orders are waiting

	// the latest registry view of the connection, for debug endpoints
	published atomic.Pointer[pb.ConnectionInfo]

	// guarded by mu: orders handed over by the dispatcher
	mu     sync.Mutex
	orders []orderRef
	closed bool

	// owned by the loop
	proxy       *proxy
	watches     map[string]*watch
	nonceSeq    uint64
	subsChanged bool // a watch's subscription changed since the registry write
}

func (s *Server) newConn(ctx context.Context, fixedType string) *conn {
	c := &conn{
		id:        s.nextConnID(),
		s:         s,
		ctx:       ctx,
		fixedType: fixedType,
		connected: time.Now(),
		notify:    make(chan struct{}, 1),
		watches:   make(map[string]*watch),
	}
	if p, ok := peer.FromContext(ctx); ok {
		c.peer = p.Addr.String()
	}
	c.log = s.log.With("conn", c.id, "peer", c.peer)
	return c
}

// deliver hands a push order to the loop; false if the connection closed.
func (c *conn) deliver(o orderRef) bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return false
	}
	c.orders = append(c.orders, o)
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
	return true
}

func (c *conn) takeOrders() []orderRef {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.orders
	c.orders = nil
	return o
}

// close marks the connection closed and returns the orders it never handled.
func (c *conn) close() []orderRef {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	o := c.orders
	c.orders = nil
	return o
}

// run is the connection's loop. One goroutine receives; this one owns all
// state, answers requests and carries out push orders.
func (c *conn) run() error {
	ctx := c.ctx
	reqs := make(chan proto.Message)
	recvErr := make(chan error, 1)
	recv := func() (proto.Message, error) {
		if c.delta != nil {
			return c.delta.Recv()
		}
		return c.sotw.Recv()
	}
	// The receiver cannot be joined here: it is blocked in Recv until gRPC
	// cancels the stream, which happens when this handler returns. It then
	// ends on its own (recvErr is buffered).
	go func() {
		for {
			req, err := recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reqs <- req:
			case <-ctx.Done():
				return
			}
		}
	}()
	defer c.finish()

	for {
		select {
		case req := <-reqs:
			var err error
			if r, ok := req.(*discovery.DeltaDiscoveryRequest); ok {
				err = c.handleDelta(r)
			} else {
				err = c.handleRequest(req.(*discovery.DiscoveryRequest))
			}
			if err != nil {
				return err
			}
		case <-c.notify:
			if err := c.handleOrders(c.takeOrders()); err != nil {
				return err
			}
		case err := <-recvErr:
			if status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
				return nil
			}
			c.log.Debug("receive ended", "err", err)
			return nil
		case <-c.s.drainCh:
			return status.Error(codes.Unavailable, "frontend draining: reconnect to another frontend")
		case <-ctx.Done():
			return nil
		}
	}
}

func (c *conn) finish() {
	for _, o := range c.close() {
		c.s.orders.done(o, pb.PushDone_CONN_GONE, 0, "")
	}
	if c.proxy != nil {
		c.s.metrics.connections.WithLabelValues(c.proxy.Version).Dec()
		c.s.removeConn(c)
		c.log.Info("connection closed", "node", c.proxy.ID)
	}
}

// open reads the node of the first request; later requests may omit it.
func (c *conn) open(node *core.Node) error {
	if c.proxy != nil {
		return nil
	}
	p, err := parseNode(node)
	if err != nil {
		c.s.metrics.badRequests.WithLabelValues("node").Inc()
		c.log.Warn("rejecting stream", "err", err)
		return status.Error(codes.InvalidArgument, err.Error())
	}
	if err := c.s.authorize(c.ctx, p); err != nil {
		c.s.metrics.badRequests.WithLabelValues("identity").Inc()
		c.log.Warn("rejecting stream", "node", p.ID, "err", err)
		return err
	}
	c.proxy = p
	c.log = c.log.With("node", p.ID)
	c.log.Info("connection opened", "namespace", p.Namespace, "generator", p.Generator, "delta", c.delta != nil)
	c.s.metrics.connections.WithLabelValues(p.Version).Inc()
	c.s.noteProxy(p, c.log)
	c.s.addConn(c)
	return nil
}

// requestType checks a request's type URL. It returns "" for a type this
// frontend does not serve (answered by silence, as the protocol allows), or
// an error that ends the stream.
func (c *conn) requestType(t string) (string, error) {
	if c.fixedType != "" {
		if t == "" {
			t = c.fixedType
		}
		if t != c.fixedType {
			c.s.metrics.badRequests.WithLabelValues("type_url").Inc()
			return "", status.Errorf(codes.InvalidArgument, "type %s on a %s stream", t, shortType(c.fixedType))
		}
	}
	if t == "" {
		c.s.metrics.badRequests.WithLabelValues("type_url").Inc()
		return "", status.Error(codes.InvalidArgument, "request without type_url on an aggregated stream")
	}
	if !supportedType(t) {
		// Unknown types (secrets, runtime, ...) get no answer; the proxy
		// keeps waiting for them, as with Istio.
		c.s.metrics.badRequests.WithLabelValues("unsupported_type").Inc()
		c.log.Debug("ignoring request for unsupported type", "type", t)
		return "", nil
	}
	return t, nil
}

// handleRequest applies one state-of-the-world request. Only a protocol
// violation ends the stream; the error is a gRPC status.
func (c *conn) handleRequest(req *discovery.DiscoveryRequest) error {
	if err := c.open(req.GetNode()); err != nil {
		return err
	}
	t, err := c.requestType(req.GetTypeUrl())
	if t == "" || err != nil {
		return err
	}
	w, seen := c.watches[t]
	if !seen {
		w = &watch{typeURL: t}
		c.watches[t] = w
	}
	nonce := req.GetResponseNonce()
	if seen && nonce != "" && nonce != w.nonce {
		// An answer to an older response: the newer one is in flight.
		c.s.metrics.expiredNonce.WithLabelValues(shortType(t)).Inc()
		return nil
	}
	if nonce != "" && req.GetErrorDetail() != nil {
		c.nack(w, nonce, req.GetErrorDetail().GetMessage())
		return c.answered(w)
	}
	changed := w.setNames(req.GetResourceNames(), !seen || nonce == "")
	c.subsChanged = c.subsChanged || changed || !seen
	if nonce != "" {
		c.ack(w, nonce, req.GetVersionInfo())
		if !changed {
			return c.answered(w)
		}
		w.awaiting, w.deferred = false, false // the answer below is the latest state
	}
	// A new subscription, a reconnect, or changed names: answer now from the
	// model as it is. A reconnecting client that already has the current
	// version is sent nothing (go-control-plane and Envoy agree on this).
	if nonce == "" && req.GetVersionInfo() != "" {
		if r, err := c.s.build(c.s.store.Snapshot(), c.proxy, w); err == nil && r.version == req.GetVersionInfo() {
			w.sentVersion, w.ackedVersion, w.genSeq = r.version, r.version, c.s.store.AppliedSeq()
			c.s.updateConn(c)
			return nil
		}
	}
	return c.answer(w)
}

// answer responds to a request at once from the model as it is.
func (c *conn) answer(w *watch) error {
	mesh := c.s.store.Snapshot()
	var err error
	if c.delta != nil {
		_, err = c.respondDelta(mesh, w, true, 0)
	} else {
		_, err = c.respond(mesh, w, true, 0)
	}
	if err != nil {
		return err
	}
	c.s.updateConn(c)
	return nil
}

// push brings one watch up to date after a change. While the client has not
// answered the last response of the type, the push is deferred: the answer
// sends the latest state (see flush).
func (c *conn) push(mesh *model.Mesh, w *watch, pushID uint64) (bool, error) {
	if w.awaiting {
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

// answered notes the client's ACK or NACK of the last response and sends a
// deferred push.
func (c *conn) answered(w *watch) error {
	w.awaiting = false
	if !w.deferred {
		return nil
	}
	w.deferred = false
	sent, err := c.push(c.s.store.Snapshot(), w, 0)
	if sent {
		c.s.updateConn(c)
	}
	return err
}

// ack records that the client applied the last response of w's type.
func (c *conn) ack(w *watch, nonce, version string) {
	if w.ackedVersion == version {
		return
	}
	w.ackedVersion = version
	w.ackedAt = time.Now()
	w.nackError = ""
	c.s.record(c, pb.DeliveryRecord_ACK, w.typeURL, version, nonce, nil, 0, "")
	c.s.updateConn(c)
}

// nack records and counts a rejection. It is never answered with the same
// config; the next change is sent as usual.
func (c *conn) nack(w *watch, nonce, msg string) {
	w.nackError = msg
	c.s.metrics.rejects.WithLabelValues(shortType(w.typeURL)).Inc()
	c.log.Warn("config rejected", "type", shortType(w.typeURL), "version", w.sentVersion, "nonce", nonce, "err", msg)
	c.s.record(c, pb.DeliveryRecord_NACK, w.typeURL, w.sentVersion, nonce, nil, 0, msg)
	c.s.updateConn(c)
}

// handleOrders brings every watched type up to date with the model (which
// has applied every order's through_seq: the dispatcher waited for it) and
// reports each order done.
func (c *conn) handleOrders(orders []orderRef) error {
	if len(orders) == 0 {
		return nil
	}
	mesh := c.s.store.Snapshot()
	var pushID uint64
	for _, o := range orders {
		pushID = max(pushID, o.order.GetPushId())
	}
	sent := false
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
	}
	synced := c.syncedSeq()
	for _, o := range orders {
		c.s.orders.done(o, res, synced, errText)
	}
	if sent {
		c.s.updateConn(c)
	}
	return sendErr
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
	if !force && full.version == w.sentVersion {
		return false, nil
	}
	r := full
	if !force && incrementalSotW(w.typeURL) && w.sentRes != nil {
		changed, any := full.onlyChanged(w.sentRes)
		if !any {
			// Only removals: the client keeps what it has, which is
			// harmless; remember the new state.
			w.sentVersion = full.version
			return false, nil
		}
		r = changed
	}
	c.nonceSeq++
	nonce := c.id + "-" + strconv.FormatUint(c.nonceSeq, 36)
	resp := &discovery.DiscoveryResponse{
		VersionInfo: r.version,
		Resources:   r.resources,
		TypeUrl:     w.typeURL,
		Nonce:       nonce,
	}
	sendStart := time.Now()
	err = c.sotw.Send(resp)
	c.s.metrics.sendTime.Observe(time.Since(sendStart).Seconds())
	c.s.metrics.configSize.WithLabelValues(shortType(w.typeURL)).Observe(float64(r.bytes))
	if err != nil {
		c.s.metrics.sendErrors.WithLabelValues(shortType(w.typeURL)).Inc()
		return false, fmt.Errorf("send %s to %s: %w", shortType(w.typeURL), c.proxy.ID, err)
	}
	w.nonce = nonce
	w.sentAt = time.Now()
	w.awaiting = true
	w.sentVersion = r.version
	if incrementalSotW(w.typeURL) {
		if r == full || w.sentRes == nil {
			w.sentRes = make(map[string]string, len(full.names))
		}
		for i, n := range r.names {
			w.sentRes[n] = r.versions[i]
		}
	}
	c.s.metrics.pushes.WithLabelValues(shortType(w.typeURL)).Inc()
	c.s.metrics.responseBytes.WithLabelValues(shortType(w.typeURL)).Add(float64(r.bytes))
	c.s.record(c, pb.DeliveryRecord_RESPONSE, w.typeURL, r.version, nonce, r.names, pushID, "")
	c.log.Debug("sent", "type", shortType(w.typeURL), "version", r.version, "resources", len(r.resources), "seq", mesh.Seq)
	return true, nil
}

// timestamp is t as a proto timestamp, nil when unset.
func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

// syncedSeq is the change-stream sequence every watched type reflects: the
// oldest model any of them was last generated from.
func (c *conn) syncedSeq() uint64 {
	var seq uint64
	first := true
	for _, w := range c.watches {
		if first || w.genSeq < seq {
			seq = w.genSeq
			first = false
		}
	}
	return seq
}

// info is the connection as the registry shows it.
func (c *conn) info() *pb.ConnectionInfo {
	ci := &pb.ConnectionInfo{
		ConnId:      c.id,
		Frontend:    c.s.id,
		NodeId:      c.proxy.ID,
		Namespace:   c.proxy.Namespace,
		ClusterId:   c.proxy.ClusterID,
		ProxyType:   c.proxy.Type,
		Generator:   c.proxy.Generator,
		SyncedSeq:   c.syncedSeq(),
		ConnectedAt: timestamppb.New(c.connected),
		Peer:        c.peer,
		Delta:       c.delta != nil,
	}
	for _, t := range pushOrder {
		w, ok := c.watches[t]
		if !ok {
			continue
		}
		ci.Watches = append(ci.Watches, &pb.Watch{
			TypeUrl:      t,
			Wildcard:     w.wildcard,
			Names:        w.names,
			AckedVersion: w.ackedVersion,
			SentVersion:  w.sentVersion,
			NackError:    w.nackError,
			Nonce:        w.nonce,
			SentAt:       timestamp(w.sentAt),
			AckedAt:      timestamp(w.ackedAt),
		})
	}
	return ci
}
