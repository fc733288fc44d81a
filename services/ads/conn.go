package ads

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pilotwire/pilotwire/pkg/model"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// sotwStream is the state-of-the-world stream a connection serves: requests
// in, responses out. The gRPC server stream is one; the script tests drive
// the connection through a fake with no gRPC.
type sotwStream interface {
	// SendMsg sends a *sotwResponse, which the server's codec encodes
	// (encoded.go).
	SendMsg(any) error
	Recv() (*discovery.DiscoveryRequest, error)
}

// deltaStream is the same for an incremental stream.
type deltaStream interface {
	Send(*discovery.DeltaDiscoveryResponse) error
	Recv() (*discovery.DeltaDiscoveryRequest, error)
}

// The gRPC streams of the ADS and per-type services.
type (
	grpcSotW  = grpc.BidiStreamingServer[discovery.DiscoveryRequest, discovery.DiscoveryResponse]
	grpcDelta = grpc.BidiStreamingServer[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]
)

var (
	_ sotwStream  = (*grpc.GenericServerStream[discovery.DiscoveryRequest, discovery.DiscoveryResponse])(nil)
	_ deltaStream = (*grpc.GenericServerStream[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse])(nil)
)

// meshSource is the model a connection generates from: *model.Store in
// production; the script tests drive a store of their own.
type meshSource interface {
	// Snapshot is the mesh as applied so far; immutable.
	Snapshot() *model.Mesh
}

// pushReporter is told how each push order ended: the order router, which
// answers the pusher, in production; a recorder in the script tests.
type pushReporter interface {
	done(o orderRef, res pb.PushDone_Result, synced uint64, errText string)
}

var (
	_ meshSource   = (*model.Store)(nil)
	_ pushReporter = (*orderRouter)(nil)
)

// orderRef is a push order waiting for a connection's loop, with the subject
// its completion goes to.
type orderRef struct {
	order   *pb.PushOrder
	reply   string
	batchTo string // the batch's done_batch_subject ("": one PushDone on reply)
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
	limiter   *rate.Limiter // requests per second; nil: no limit
	admitted  func()        // frees the stream's admission slot (idempotent); nil in tests

	// the latest registry view of the connection, for debug endpoints
	published atomic.Pointer[pb.ConnectionInfo]

	// SDS (sds.go): kicked when a Secret the connection asked for changes
	// (cap 1), and when the earliest unsent change was seen (unix ns; 0:
	// none)
	sdsKick  chan struct{}
	sdsSince atomic.Int64

	// guarded by mu: orders handed over by the dispatcher
	mu     sync.Mutex
	orders []orderRef
	closed bool

	// owned by the loop
	proxy       *proxy
	watches     map[string]*watch
	nonceSeq    uint64
	subsChanged bool      // a watch's subscription (or the scope) changed since the registry write
	scope       *pb.Scope // what the config depends on, as last computed (nil: not yet)
	orderSeq    uint64    // highest through_seq of the orders handled on this connection
	// connected as every registry view shows it, made with the first
	connectedAt *timestamppb.Timestamp
	// a stream that asked debug questions before any xDS (or only them):
	// its caller, and the node it sent (debugads.go)
	debugProxy *proxy
	debugNode  *core.Node
	// the secrets watch (sds.go); nil until the stream asks for secrets
	sds *sdsWatch
}

func (s *Server) newConn(ctx context.Context, fixedType string) *conn {
	c := &conn{
		id:        s.nextConnID(),
		s:         s,
		ctx:       ctx,
		fixedType: fixedType,
		connected: time.Now(),
		notify:    make(chan struct{}, 1),
		sdsKick:   make(chan struct{}, 1),
		watches:   make(map[string]*watch),
	}
	if l := s.limits; l.requestRate > 0 {
		c.limiter = rate.NewLimiter(rate.Limit(l.requestRate), max(l.requestBurst, 1))
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
// state, answers requests and carries out push orders. A stream shed for
// its client's behaviour is counted and logged.
func (c *conn) run() error {
	return c.noteShed(c.serve())
}

func (c *conn) serve() error {
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
			if c.limiter != nil && !c.limiter.Allow() {
				return shed(codes.ResourceExhausted, "request_rate", "more than %g requests/s on one stream (--stream-request-rate): stream closed", c.s.limits.requestRate)
			}
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
		case <-c.sdsKick:
			if err := c.pushSDS(); err != nil {
				return err
			}
		case err := <-recvErr:
			if status.Code(err) == codes.Canceled || errors.Is(err, context.Canceled) || errors.Is(err, io.EOF) {
				return nil
			}
			c.log.Debug("receive ended", "err", err)
			if _, ok := status.FromError(err); ok {
				return err
			}
			return status.Error(codes.Internal, "receive: "+err.Error())
		case <-c.s.drainCh:
			return status.Error(codes.Unavailable, "frontend draining: reconnect to another frontend")
		case <-ctx.Done():
			return nil
		}
	}
}

func (c *conn) finish() {
	for _, o := range c.close() {
		c.s.reports.done(o, pb.PushDone_CONN_GONE, 0, "")
	}
	if c.s.sds != nil {
		c.s.sds.forget(c)
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
	if node == nil {
		node = c.debugNode // sent with the stream's first (debug) request
	}
	p, err := parseNode(node)
	if err != nil {
		c.s.metrics.badRequests.WithLabelValues("node").Inc()
		return shed(codes.InvalidArgument, "node", "%s", err.Error())
	}
	if err := c.s.authorize(c.ctx, p); err != nil {
		c.s.metrics.badRequests.WithLabelValues("identity").Inc()
		st := status.Convert(err)
		return shed(st.Code(), "identity", "node %s: %s", p.ID, st.Message())
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
			return "", shed(codes.InvalidArgument, "type_url", "type %.256s on a %s stream", t, shortType(c.fixedType))
		}
	}
	if t == "" {
		c.s.metrics.badRequests.WithLabelValues("type_url").Inc()
		return "", shed(codes.InvalidArgument, "type_url", "request without type_url on an aggregated stream")
	}
	if !wellFormedType(t) {
		c.s.metrics.badRequests.WithLabelValues("type_url").Inc()
		return "", shed(codes.InvalidArgument, "type_url", "type_url %.256q is not type.googleapis.com/<message name>", t)
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
