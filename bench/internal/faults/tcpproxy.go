package faults

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// cutProxy forwards TCP connections to the first upstream that answers,
// and can cut them: while cut it closes every open connection and refuses
// new ones (accepted and closed at once), as a network partition between
// one client and every NATS node would.
//
// As a balancer (newBalancer) it starts each connection at the next
// upstream in turn instead of the first, and tries the others in order
// when that one refuses: a Kubernetes Service in front of the ADS
// frontends, whose dead or not yet listening pods take no new
// connections.
type cutProxy struct {
	// set at construction
	ln         net.Listener
	upstreams  []string
	roundRobin bool
	next       atomic.Uint64

	// guarded by mu
	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}

	wg sync.WaitGroup
}

func newCutProxy(addr string, upstreams []string) (*cutProxy, error) {
	return listenProxy(addr, upstreams, false)
}

func listenProxy(addr string, upstreams []string, roundRobin bool) (*cutProxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &cutProxy{ln: ln, upstreams: upstreams, roundRobin: roundRobin, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// newBalancer is a cutProxy that spreads connections over upstreams in
// turn.
func newBalancer(addr string, upstreams []string) (*cutProxy, error) {
	return listenProxy(addr, upstreams, true)
}

func (p *cutProxy) addr() string { return p.ln.Addr().String() }

func (p *cutProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(c)
		}()
	}
}

func (p *cutProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *cutProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *cutProxy) serve(down net.Conn) {
	if !p.track(down) {
		down.Close()
		return
	}
	defer p.untrack(down)
	var up net.Conn
	first := 0
	if p.roundRobin {
		first = int(p.next.Add(1)-1) % len(p.upstreams)
	}
	for i := range p.upstreams {
		a := p.upstreams[(first+i)%len(p.upstreams)]
		c, err := net.DialTimeout("tcp", a, time.Second)
		if err == nil {
			up = c
			break
		}
	}
	if up == nil || !p.track(up) {
		if up != nil {
			up.Close()
		}
		return
	}
	defer p.untrack(up)
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, down); done <- struct{}{} }()
	go func() { _, _ = io.Copy(down, up); done <- struct{}{} }()
	<-done
	up.Close()
	down.Close()
	<-done
}

// setCut cuts (true) or restores (false) the path.
func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	p.cut = cut
	var open []net.Conn
	if cut {
		for c := range p.conns {
			open = append(open, c)
		}
	}
	p.mu.Unlock()
	for _, c := range open {
		c.Close()
	}
}

func (p *cutProxy) close() {
	p.ln.Close()
	p.setCut(true)
	p.wg.Wait()
}
