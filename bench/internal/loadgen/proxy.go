package loadgen

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/pilotwire/pilotwire/bench/internal/xdsstate"
)

// held is one resource a proxy holds.
type held struct {
	entry   uint64 // xdsstate.EntryHash(name, content)
	version string // delta: the resource version the server gave
	refs    []string
}

// proxy is one simulated Envoy. Its loop goroutine owns the stream and
// the subscription; mu guards what the fleet reads.
type proxy struct {
	// set at construction
	f    *Fleet
	idx  int
	node *core.Node

	// guarded by mu
	mu             sync.Mutex
	held           [xdsstate.NumTypes]map[string]held
	state          xdsstate.State
	answered       [xdsstate.NumTypes]int64 // unix ns: last ACK (or delta resume request) on the current stream
	streamStart    int64                    // unix ns the current stream was opened
	lastArrival    int64                    // unix ns of the last response on it
	changedAck     int64                    // ACK time of the last state change
	changedArrival int64
	matchID        int64 // target last matched
	matchAck       int64
	matchArrival   int64
	streamCount    int
	reconnect      bool               // a reconnect was requested
	dropState      bool               // ... as a new proxy (forgetting what it holds)
	cancelStream   context.CancelFunc // ends the current stream

	// owned by the loop
	conn      *grpc.ClientConn
	names     [xdsstate.NumTypes][]string // EDS, RDS subscriptions, sorted
	version   [xdsstate.NumTypes]string   // SotW: last version ACKed
	nonce     [xdsstate.NumTypes]string   // last nonce received
	requested [xdsstate.NumTypes]bool     // on the current stream
}

// ProxyNamespace is the namespace of every simulated proxy.
const ProxyNamespace = "loadgen"

func newProxy(f *Fleet, i int) *proxy {
	n := f.opts.First + i
	// Every proxy sits in a namespace of its own, apart from the mesh's
	// services, and backs none of them, so every proxy is sent the same
	// configuration (xdsstate.Expected) and one target state fits all.
	// Proxies in a service's namespace get routes that resolve its short
	// names, which the benchmark does not model.
	const ns = ProxyNamespace
	ip := fmt.Sprintf("10.%d.%d.%d", 200+n/65025%50, n/255%255, n%255+1)
	p := &proxy{
		f:   f,
		idx: i,
		node: &core.Node{
			Id:      fmt.Sprintf("sidecar~%s~loadgen-%d.%s~%s.svc.cluster.local", ip, n, ns, ns),
			Cluster: "loadgen",
		},
	}
	for t := range xdsstate.NumTypes {
		p.held[t] = make(map[string]held)
	}
	return p
}

var errReconnect = errors.New("reconnect requested")

// run keeps a stream open until ctx ends, retrying with backoff.
func (p *proxy) run(ctx context.Context) {
	defer func() {
		if p.conn != nil {
			p.conn.Close()
		}
	}()
	attempt := 0
	for ctx.Err() == nil {
		progressed, err := p.session(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errReconnect) {
			attempt = 0
			continue
		}
		p.f.failures.Add(1)
		p.f.log.Debug("stream failed", "proxy", p.idx, "err", err)
		if progressed {
			attempt = 0
		}
		// Envoy's jittered exponential backoff: uniform in [0, base*2^n),
		// capped.
		ceiling := min(p.f.opts.BackoffMax, p.f.opts.BackoffBase<<min(attempt, 16))
		attempt++
		t := time.NewTimer(time.Duration(rand.Int64N(int64(ceiling)) + 1))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// requestReconnect ends the current stream and connection; the loop
// dials again at once, as the same proxy (resuming what it holds) or, if
// fresh, as a new one.
func (p *proxy) requestReconnect(fresh bool) {
	p.mu.Lock()
	p.reconnect = true
	p.dropState = fresh
	cancel := p.cancelStream
	p.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// session runs one stream. progressed reports whether any response came.
func (p *proxy) session(ctx context.Context) (progressed bool, err error) {
	p.mu.Lock()
	if p.reconnect && p.conn != nil {
		p.conn.Close()
		p.conn = nil
	}
	p.reconnect = false
	if p.dropState {
		p.dropState = false
		for t := range xdsstate.NumTypes {
			p.held[t] = make(map[string]held)
		}
		p.state = xdsstate.State{}
		p.version, p.nonce, p.names = [xdsstate.NumTypes]string{}, [xdsstate.NumTypes]string{}, [xdsstate.NumTypes][]string{}
	}
	sctx, cancel := context.WithCancel(ctx)
	p.cancelStream = cancel
	p.mu.Unlock()
	defer cancel()
	if p.conn == nil {
		cc, err := grpc.NewClient(p.f.opts.Addr,
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithStatsHandler(&p.f.stats),
			grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(256<<20)),
		)
		if err != nil {
			return false, fmt.Errorf("dial %s: %w", p.f.opts.Addr, err)
		}
		p.conn = cc
	}
	client := discovery.NewAggregatedDiscoveryServiceClient(p.conn)
	if p.f.opts.Delta {
		st, err := client.DeltaAggregatedResources(sctx)
		if err != nil {
			return false, p.streamErr(err)
		}
		return p.deltaLoop(st)
	}
	st, err := client.StreamAggregatedResources(sctx)
	if err != nil {
		return false, p.streamErr(err)
	}
	return p.sotwLoop(st)
}

// streamErr maps the error of a stream ended by requestReconnect to
// errReconnect.
func (p *proxy) streamErr(err error) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reconnect {
		return errReconnect
	}
	return err
}

// opened records a new stream and returns whether the proxy holds config
// from an earlier one (and so resumes rather than starts fresh).
func (p *proxy) opened() (resume bool) {
	now := time.Now().UnixNano()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.streamCount++
	p.streamStart = now
	p.lastArrival = 0
	p.answered = [xdsstate.NumTypes]int64{}
	p.requested = [xdsstate.NumTypes]bool{}
	p.f.streams.Add(1)
	p.f.streamsOpened.Add(1)
	return len(p.held[xdsstate.CDS]) > 0 || len(p.held[xdsstate.LDS]) > 0
}

func (p *proxy) closed() { p.f.streams.Add(-1) }

// ---- state of the world ----

func (p *proxy) sotwLoop(st grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse]) (bool, error) {
	resume := p.opened()
	defer p.closed()
	first := true
	send := func(t int) error {
		req := &discovery.DiscoveryRequest{
			TypeUrl:       xdsstate.TypeURLs[t],
			VersionInfo:   p.version[t],
			ResponseNonce: p.nonce[t],
			ResourceNames: p.names[t],
		}
		if first {
			req.Node, first = p.node, false
		}
		p.requested[t] = true
		return st.Send(req)
	}
	if resume {
		// Envoy resumes every subscription at once, with what it holds. A
		// server may answer, or not when the versions are current: the
		// subscription counts as answered once sent, and again at the ACK
		// of any response.
		clear(p.nonce[:])
		for t := range xdsstate.NumTypes {
			if (t == xdsstate.EDS || t == xdsstate.RDS) && len(p.names[t]) == 0 {
				continue
			}
			if err := send(t); err != nil {
				return false, p.streamErr(err)
			}
		}
		now := time.Now().UnixNano()
		p.mu.Lock()
		for t := range xdsstate.NumTypes {
			if p.requested[t] {
				p.answered[t] = now
			}
		}
		p.settled(p.state, now, now)
		p.mu.Unlock()
	} else {
		p.version, p.nonce, p.names = [xdsstate.NumTypes]string{}, [xdsstate.NumTypes]string{}, [xdsstate.NumTypes][]string{}
		if err := send(xdsstate.CDS); err != nil {
			return false, p.streamErr(err)
		}
	}
	progressed := false
	for {
		resp, err := st.Recv()
		if err != nil {
			return progressed, p.streamErr(err)
		}
		progressed = true
		arrival := time.Now().UnixNano()
		p.f.lastResponse.Store(arrival)
		p.f.responses.Add(1)
		t := xdsstate.Index(resp.GetTypeUrl())
		if t < 0 {
			continue
		}
		next, err := p.decode(t, resp.GetResources())
		if err != nil {
			p.f.nacks.Add(1)
			p.f.log.Debug("undecodable response", "proxy", p.idx, "type", xdsstate.Names[t], "err", err)
			continue
		}
		p.nonce[t] = resp.GetNonce()
		p.version[t] = resp.GetVersionInfo()
		p.mu.Lock()
		before := p.state
		if xdsstate.FullState(t) {
			p.replace(t, next)
		} else {
			p.merge(t, next, nil)
		}
		p.mu.Unlock()
		if err := send(t); err != nil { // the ACK
			return progressed, p.streamErr(err)
		}
		ack := time.Now().UnixNano()
		// Follow references: CDS -> EDS, LDS -> RDS; LDS only once the
		// clusters are warm, as Envoy's init manager does.
		var follow int = -1
		switch t {
		case xdsstate.CDS:
			follow = xdsstate.EDS
		case xdsstate.LDS:
			follow = xdsstate.RDS
		}
		p.mu.Lock()
		p.answered[t] = ack
		changedNames := false
		if follow >= 0 {
			names := p.refsOf(t)
			if !slices.Equal(names, p.names[follow]) {
				p.names[follow] = names
				p.prune(follow, names)
				changedNames = true
			}
		}
		p.settled(before, ack, arrival)
		p.mu.Unlock()
		if changedNames && len(p.names[follow]) > 0 {
			if err := send(follow); err != nil {
				return progressed, p.streamErr(err)
			}
		}
		if !p.requested[xdsstate.LDS] && (t == xdsstate.EDS || (t == xdsstate.CDS && len(p.names[xdsstate.EDS]) == 0)) {
			if err := send(xdsstate.LDS); err != nil {
				return progressed, p.streamErr(err)
			}
		}
	}
}

// ---- incremental ----

func (p *proxy) deltaLoop(st grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse]) (bool, error) {
	resume := p.opened()
	defer p.closed()
	first := true
	send := func(req *discovery.DeltaDiscoveryRequest) error {
		if first {
			req.Node, first = p.node, false
		}
		return st.Send(req)
	}
	subscribe := func(t int, add, remove []string, initial bool) error {
		req := &discovery.DeltaDiscoveryRequest{TypeUrl: xdsstate.TypeURLs[t], ResourceNamesSubscribe: add, ResourceNamesUnsubscribe: remove}
		if initial {
			p.mu.Lock()
			if len(p.held[t]) > 0 {
				req.InitialResourceVersions = make(map[string]string, len(p.held[t]))
				for n, h := range p.held[t] {
					req.InitialResourceVersions[n] = h.version
				}
			}
			p.mu.Unlock()
		}
		p.requested[t] = true
		return send(req)
	}
	if resume {
		now := time.Now().UnixNano()
		for t := range xdsstate.NumTypes {
			if (t == xdsstate.EDS || t == xdsstate.RDS) && len(p.names[t]) == 0 {
				continue
			}
			var names []string
			if t == xdsstate.EDS || t == xdsstate.RDS {
				names = p.names[t]
			}
			if err := subscribe(t, names, nil, true); err != nil {
				return false, p.streamErr(err)
			}
		}
		// The server need not answer a client that says it is current.
		p.mu.Lock()
		for t := range xdsstate.NumTypes {
			if p.requested[t] {
				p.answered[t] = now
			}
		}
		p.settled(p.state, now, now)
		p.mu.Unlock()
	} else {
		p.names = [xdsstate.NumTypes][]string{}
		if err := subscribe(xdsstate.CDS, nil, nil, false); err != nil {
			return false, p.streamErr(err)
		}
	}
	progressed := false
	for {
		resp, err := st.Recv()
		if err != nil {
			return progressed, p.streamErr(err)
		}
		progressed = true
		arrival := time.Now().UnixNano()
		p.f.lastResponse.Store(arrival)
		p.f.responses.Add(1)
		t := xdsstate.Index(resp.GetTypeUrl())
		if t < 0 {
			continue
		}
		anys := make([]*anypb.Any, len(resp.GetResources()))
		versions := make([]string, len(resp.GetResources()))
		for i, r := range resp.GetResources() {
			anys[i], versions[i] = r.GetResource(), r.GetVersion()
		}
		next, err := p.decode(t, anys)
		if err != nil {
			p.f.nacks.Add(1)
			continue
		}
		for i := range next {
			next[i].held.version = versions[i]
		}
		p.mu.Lock()
		before := p.state
		p.merge(t, next, resp.GetRemovedResources())
		p.mu.Unlock()
		if err := send(&discovery.DeltaDiscoveryRequest{TypeUrl: resp.GetTypeUrl(), ResponseNonce: resp.GetNonce()}); err != nil {
			return progressed, p.streamErr(err)
		}
		ack := time.Now().UnixNano()
		follow := -1
		switch t {
		case xdsstate.CDS:
			follow = xdsstate.EDS
		case xdsstate.LDS:
			follow = xdsstate.RDS
		}
		var add, remove []string
		p.mu.Lock()
		p.answered[t] = ack
		if follow >= 0 {
			names := p.refsOf(t)
			add, remove = diffSorted(p.names[follow], names)
			if len(add) > 0 || len(remove) > 0 {
				p.names[follow] = names
				p.prune(follow, names)
			}
		}
		p.settled(before, ack, arrival)
		p.mu.Unlock()
		if len(add) > 0 || len(remove) > 0 {
			if err := subscribe(follow, add, remove, false); err != nil {
				return progressed, p.streamErr(err)
			}
		}
		if !p.requested[xdsstate.LDS] && (t == xdsstate.EDS || (t == xdsstate.CDS && len(p.names[xdsstate.EDS]) == 0)) {
			if err := subscribe(xdsstate.LDS, nil, nil, false); err != nil {
				return progressed, p.streamErr(err)
			}
		}
	}
}

// ---- state ----

// named is one decoded resource of a response.
type named struct {
	name string
	held held
}

// decode hashes (and, when new to the fleet, decodes) a response's
// resources, and counts them.
func (p *proxy) decode(t int, rs []*anypb.Any) ([]named, error) {
	out := make([]named, 0, len(rs))
	var bytes int64
	for _, a := range rs {
		if a == nil {
			continue
		}
		v := a.GetValue()
		bytes += int64(len(v))
		d, content, err := p.f.cache.decode(t, v, p.f.opts.DecodeAll, &p.f.decodes)
		if err != nil {
			return nil, err
		}
		out = append(out, named{name: d.Name, held: held{entry: xdsstate.EntryHash(d.Name, content), refs: d.Refs}})
	}
	c := &p.f.byType[t]
	c.responses.Add(1)
	c.resources.Add(int64(len(out)))
	c.bytes.Add(bytes)
	return out, nil
}

// replace makes rs the whole set of type t. Caller holds mu.
func (p *proxy) replace(t int, rs []named) {
	m := make(map[string]held, len(rs))
	var x uint64
	for _, r := range rs {
		if old, dup := m[r.name]; dup {
			x ^= old.entry
		}
		m[r.name] = r.held
		x ^= r.held.entry
	}
	p.held[t] = m
	p.state[t] = x
}

// merge updates the resources of rs and removes those named in removed.
// Caller holds mu.
func (p *proxy) merge(t int, rs []named, removed []string) {
	m := p.held[t]
	for _, r := range rs {
		if old, ok := m[r.name]; ok {
			p.state[t] ^= old.entry
		}
		m[r.name] = r.held
		p.state[t] ^= r.held.entry
	}
	for _, n := range removed {
		if old, ok := m[n]; ok {
			p.state[t] ^= old.entry
			delete(m, n)
		}
	}
}

// prune drops resources of type t no longer subscribed, as Envoy forgets
// the load assignment of a removed cluster. Caller holds mu.
func (p *proxy) prune(t int, names []string) {
	for n, h := range p.held[t] {
		if _, ok := slices.BinarySearch(names, n); !ok {
			p.state[t] ^= h.entry
			delete(p.held[t], n)
		}
	}
}

// refsOf returns the sorted names the resources of type t refer to.
// Caller holds mu.
func (p *proxy) refsOf(t int) []string {
	var names []string
	for _, h := range p.held[t] {
		names = append(names, h.refs...)
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// settled records a state change and checks the target. Caller holds mu.
func (p *proxy) settled(before xdsstate.State, ack, arrival int64) {
	p.lastArrival = max(p.lastArrival, arrival)
	if p.state != before {
		p.changedAck, p.changedArrival = ack, arrival
	}
	p.check(p.f.target.Load(), ack, arrival)
}

// check records that the proxy reached t, at ack and arrival, if it holds
// it. Caller holds mu.
func (p *proxy) check(t *Target, ack, arrival int64) {
	if t == nil || p.matchID == t.ID || p.state != t.State {
		return
	}
	if t.Fresh {
		if p.streamStart < t.Since {
			return
		}
		for typ := range xdsstate.NumTypes {
			if len(p.held[typ]) > 0 && p.answered[typ] < t.Since {
				return
			}
		}
		// Converged when the last type was answered.
		for typ := range xdsstate.NumTypes {
			ack = max(ack, p.answered[typ])
		}
	}
	p.matchID, p.matchAck, p.matchArrival = t.ID, ack, arrival
	p.f.matchedOne()
}

func (p *proxy) heldCounts() [xdsstate.NumTypes]int {
	var n [xdsstate.NumTypes]int
	for t := range xdsstate.NumTypes {
		n[t] = len(p.held[t])
	}
	return n
}

// diffSorted returns what to subscribe to and unsubscribe from to go from
// sorted old to sorted next.
func diffSorted(old, next []string) (add, remove []string) {
	i, j := 0, 0
	for i < len(old) || j < len(next) {
		switch {
		case j == len(next) || (i < len(old) && old[i] < next[j]):
			remove = append(remove, old[i])
			i++
		case i == len(old) || next[j] < old[i]:
			add = append(add, next[j])
			j++
		default:
			i++
			j++
		}
	}
	return add, remove
}
