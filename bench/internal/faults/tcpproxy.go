package faults

import (
	"io"
	"net"
	"sync"
	"time"
)

// cutProxy forwards TCP connections to the first upstream that answers,
// and can cut them: while cut it closes every open connection and refuses
// new ones (accepted and closed at once), as a network partition between
// one client and every NATS node would.
type cutProxy struct {
	// set at construction
	ln        net.Listener
	upstreams []string

	// guarded by mu
	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}

	wg sync.WaitGroup
}

func newCutProxy(addr string, upstreams []string) (*cutProxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	p := &cutProxy{ln: ln, upstreams: upstreams, conns: make(map[net.Conn]struct{})}
	p.wg.Add(1)
	go p.accept()
	return p, nil
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
	for _, a := range p.upstreams {
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
