// Package loadgen simulates a fleet of Envoy sidecars talking ADS to one
// control plane: each proxy has its own gRPC connection and one ADS stream
// (state of the world, or incremental with Options.Delta), subscribes as
// Envoy does (CDS wildcard, EDS for the clusters it got, LDS wildcard, RDS
// for the route configurations its listeners name), decodes and ACKs every
// response, and keeps a content hash of what it holds (xdsstate.State).
//
// The harness sets a Target (the State every proxy should reach) and
// waits; each proxy records when it first held the target: the arrival
// time of the response that completed it and the time its ACK was sent.
// A Fleet runs in the process that calls it, or in a `pwbench loadgen
// --control` process driven over net/rpc (Remote).
package loadgen

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/stats"

	"github.com/pilotwire/pilotwire/bench/internal/xdsstate"
)

// Options configure a fleet.
type Options struct {
	// Addr is the control plane's ADS address (host:port on loopback).
	Addr string
	// Proxies is the number of simulated proxies.
	Proxies int
	// First numbers the proxies' node ids from First, so that several
	// fleets can share a server without sharing node ids.
	First int
	// Delta makes proxies use incremental xDS instead of state of the world.
	Delta bool
	// DecodeAll decodes every resource of every response. By default a
	// resource whose bytes were decoded once by any proxy of the fleet is
	// not decoded again (its content hash is still computed), which keeps
	// the generator's CPU low on machines it shares with the server.
	DecodeAll bool
	// BackoffBase and BackoffMax bound the jittered exponential backoff
	// after a failed stream, as Envoy's (defaults 500ms and 30s).
	BackoffBase, BackoffMax time.Duration
	// Log receives stream errors at debug level (default: discarded).
	Log *slog.Logger
}

// Target is the configuration every proxy should reach.
type Target struct {
	ID    int64
	State xdsstate.State
	// Fresh targets (reconnects) also require a stream opened at or after
	// Since on which every type the proxy holds was subscribed again; a
	// proxy's time is that of the last subscription or of the ACK of the
	// last response on the new stream, whichever is later (a server may
	// not answer a proxy that resumes with current versions).
	Fresh bool
	Since int64 // unix nanoseconds
}

// ProxyTime is when one proxy first held the target.
type ProxyTime struct {
	Proxy   int   // index in the fleet
	Arrival int64 // unix ns: the response completing the target arrived
	Ack     int64 // unix ns: its ACK was sent
}

// Result reports convergence to one target.
type Result struct {
	TargetID  int64
	Total     int
	Matched   int
	Times     []ProxyTime // matched proxies, in proxy order
	Unmatched []int       // indexes of proxies not (yet) at the target, at most 20
	Sample    []string    // states of a few unmatched proxies, for diagnostics
}

// TypeStats are counters of one type.
type TypeStats struct {
	Responses int64
	Resources int64
	Bytes     int64 // resource bytes (Any values) received
}

// Stats are cumulative counters of the fleet.
type Stats struct {
	Proxies        int
	Streams        int   // streams open now
	StreamsOpened  int64 // since the start
	StreamFailures int64 // streams that ended with an error other than a requested reconnect
	MessageBytes   int64 // DiscoveryResponse bytes received (gRPC payloads, uncompressed)
	WireBytes      int64 // the same on the wire, with gRPC framing
	Responses      int64
	Nacks          int64 // responses that could not be decoded
	Decodes        int64 // resources unmarshalled
	Versions       int64 // distinct (type, content) resources seen
	ByType         [xdsstate.NumTypes]TypeStats
	LastResponse   int64 // unix ns of the last response received
}

// Final is the fleet's final configuration, summarized.
type Final struct {
	// States counts proxies by the state they hold.
	States map[xdsstate.State]int
	// Resources held by proxy 0, per type.
	Resources [xdsstate.NumTypes]int
}

// Fleet is a set of simulated proxies.
type Fleet struct {
	// set at construction
	opts    Options
	log     *slog.Logger
	proxies []*proxy
	cache   decodeCache
	stats   statsHandler

	target    atomic.Pointer[Target]
	matched   atomic.Int64
	matchedCh chan struct{} // cap 1: a proxy matched

	// counters
	streams       atomic.Int64
	streamsOpened atomic.Int64
	failures      atomic.Int64
	responses     atomic.Int64
	nacks         atomic.Int64
	decodes       atomic.Int64
	lastResponse  atomic.Int64
	byType        [xdsstate.NumTypes]struct{ responses, resources, bytes atomic.Int64 }

	// guarded by mu
	mu      sync.Mutex
	started bool
	closed  bool
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// New returns a fleet; it does nothing until Start.
func New(o Options) (*Fleet, error) {
	if o.Addr == "" || o.Proxies <= 0 {
		return nil, errors.New("loadgen: an address and at least one proxy are required")
	}
	if o.BackoffBase <= 0 {
		o.BackoffBase = 500 * time.Millisecond
	}
	if o.BackoffMax <= 0 {
		o.BackoffMax = 30 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	f := &Fleet{opts: o, log: o.Log, matchedCh: make(chan struct{}, 1)}
	f.stats.f = f
	for i := range o.Proxies {
		f.proxies = append(f.proxies, newProxy(f, i))
	}
	return f, nil
}

// Start opens every proxy's connection and stream, all at once, and
// returns at once; proxies retry failed streams with backoff until Close.
func (f *Fleet) Start(_ context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return errors.New("loadgen: fleet closed")
	}
	if f.started {
		return errors.New("loadgen: fleet already started")
	}
	f.started = true
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel = cancel
	for _, p := range f.proxies {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			p.run(ctx)
		}()
	}
	return nil
}

// SetTarget makes t the target every proxy is measured against. Proxies
// already holding it count as converged at their last change.
func (f *Fleet) SetTarget(_ context.Context, t Target) error {
	f.target.Store(&t)
	f.matched.Store(0)
	for _, p := range f.proxies {
		p.mu.Lock()
		p.check(&t, p.changedAck, p.changedArrival)
		p.mu.Unlock()
	}
	return nil
}

// Wait returns when every proxy holds the target, or after timeout with
// the proxies that did.
func (f *Fleet) Wait(ctx context.Context, timeout time.Duration) (Result, error) {
	t := f.target.Load()
	if t == nil {
		return Result{}, errors.New("loadgen: no target set")
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for f.matched.Load() < int64(len(f.proxies)) {
		select {
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-deadline.C:
			return f.result(t), nil
		case <-f.matchedCh:
		case <-tick.C:
		}
	}
	return f.result(t), nil
}

func (f *Fleet) result(t *Target) Result {
	r := Result{TargetID: t.ID, Total: len(f.proxies)}
	for i, p := range f.proxies {
		p.mu.Lock()
		if p.matchID == t.ID {
			pt := ProxyTime{Proxy: i, Arrival: p.matchArrival, Ack: p.matchAck}
			if t.Fresh {
				for typ := range xdsstate.NumTypes {
					pt.Ack = max(pt.Ack, p.answered[typ])
				}
				pt.Arrival = max(pt.Arrival, p.lastArrival)
			}
			r.Times = append(r.Times, pt)
		} else if len(r.Unmatched) < 20 {
			r.Unmatched = append(r.Unmatched, i)
			if len(r.Sample) < 3 {
				r.Sample = append(r.Sample, fmt.Sprintf("proxy %d: %v streams=%d held=%v", i, p.state, p.streamCount, p.heldCounts()))
			}
		}
		p.mu.Unlock()
	}
	r.Matched = len(r.Times)
	return r
}

// Quiet returns once no response has arrived for quiet since it was
// called, or after max.
func (f *Fleet) Quiet(ctx context.Context, quiet, max time.Duration) error {
	called := time.Now()
	deadline := called.Add(max)
	tick := time.NewTicker(min(quiet/4, 50*time.Millisecond) + time.Millisecond)
	defer tick.Stop()
	for {
		last := time.Unix(0, f.lastResponse.Load())
		if last.Before(called) {
			last = called
		}
		now := time.Now()
		if now.Sub(last) >= quiet || now.After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// Stats returns the fleet's counters.
func (f *Fleet) Stats(_ context.Context) (Stats, error) {
	s := Stats{
		Proxies:        len(f.proxies),
		Streams:        int(f.streams.Load()),
		StreamsOpened:  f.streamsOpened.Load(),
		StreamFailures: f.failures.Load(),
		MessageBytes:   f.stats.payload.Load(),
		WireBytes:      f.stats.wire.Load(),
		Responses:      f.responses.Load(),
		Nacks:          f.nacks.Load(),
		Decodes:        f.decodes.Load(),
		Versions:       f.cache.versions.Load(),
		LastResponse:   f.lastResponse.Load(),
	}
	for t := range xdsstate.NumTypes {
		s.ByType[t] = TypeStats{
			Responses: f.byType[t].responses.Load(),
			Resources: f.byType[t].resources.Load(),
			Bytes:     f.byType[t].bytes.Load(),
		}
	}
	return s, nil
}

// Reconnect closes every proxy's connection at once; each dials again at
// once and resumes as Envoy does (sending what it holds) or, if fresh,
// starts over as a new proxy. It returns the time the connections were
// closed, the Since of a Fresh target.
func (f *Fleet) Reconnect(_ context.Context, fresh bool) (int64, error) {
	now := time.Now().UnixNano()
	for _, p := range f.proxies {
		p.requestReconnect(fresh)
	}
	return now, nil
}

// Final summarizes what the proxies hold.
func (f *Fleet) Final(_ context.Context) (Final, error) {
	out := Final{States: make(map[xdsstate.State]int)}
	for i, p := range f.proxies {
		p.mu.Lock()
		out.States[p.state]++
		if i == 0 {
			out.Resources = p.heldCounts()
		}
		p.mu.Unlock()
	}
	return out, nil
}

// Close ends every stream and connection and waits for the proxies.
func (f *Fleet) Close() error {
	f.mu.Lock()
	f.closed = true
	cancel := f.cancel
	f.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	f.wg.Wait()
	return nil
}

// matchedOne is called by a proxy that reached the target.
func (f *Fleet) matchedOne() {
	f.matched.Add(1)
	select {
	case f.matchedCh <- struct{}{}:
	default:
	}
}

// SortedTimes returns the times of r sorted by ACK time.
func (r Result) SortedTimes() []ProxyTime {
	out := slices.Clone(r.Times)
	slices.SortFunc(out, func(a, b ProxyTime) int { return cmp.Compare(a.Ack, b.Ack) })
	return out
}

// statsHandler counts the response bytes of every connection.
type statsHandler struct {
	f       *Fleet
	payload atomic.Int64
	wire    atomic.Int64
}

var _ stats.Handler = (*statsHandler)(nil)

func (h *statsHandler) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (h *statsHandler) HandleRPC(_ context.Context, s stats.RPCStats) {
	if in, ok := s.(*stats.InPayload); ok {
		h.payload.Add(int64(in.Length))
		h.wire.Add(int64(in.WireLength))
	}
}
func (h *statsHandler) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context {
	return ctx
}
func (h *statsHandler) HandleConn(context.Context, stats.ConnStats) {}
