package natstest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// DropProxy forwards TCP connections to one upstream. While dropping, what
// the upstream sends is read and thrown away, as bytes in flight are when
// a connection dies; while holding, it is kept and forwarded when the hold
// ends, as from a server that stalls; Cut closes every connection (new
// ones forward again).
type DropProxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	dropping bool
	holding  bool
	held     map[net.Conn][]byte // by downstream connection, while holding
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup
}

// NewDropProxy listens on a loopback port and forwards to upstream
// (host:port) until the test ends.
func NewDropProxy(t testing.TB, upstream string) *DropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &DropProxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}, held: map[net.Conn][]byte{}}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.serve(c) }()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.Cut(); p.wg.Wait() })
	return p
}

// Addr is the proxy's host:port.
func (p *DropProxy) Addr() string { return p.ln.Addr().String() }

// Drop starts (true) or stops throwing away what the upstream sends.
func (p *DropProxy) Drop(on bool) { p.mu.Lock(); p.dropping = on; p.mu.Unlock() }

// Hold starts (true) or ends keeping what the upstream sends; ending it
// forwards what was kept, in order, before anything newer.
func (p *DropProxy) Hold(on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.holding = on
	if on {
		return
	}
	for down, b := range p.held {
		_, _ = down.Write(b) // a write error ends the connection's own copy
		delete(p.held, down)
	}
}

// pass reports whether b, read from down's upstream, is to be written to
// down now: not while dropping, and not while holding (then it is kept).
func (p *DropProxy) pass(down net.Conn, b []byte) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.dropping:
		return false
	case p.holding:
		p.held[down] = append(p.held[down], b...)
		return false
	}
	return true
}

// Cut closes every open connection, then stops dropping. Both happen under
// the lock: bytes the upstream sent before the cut (a delivery the server
// counted, still in its write buffer) are never forwarded, and a
// connection made after the cut starts forwarding at once.
func (p *DropProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
	}
	p.dropping = false
}

func (p *DropProxy) serve(down net.Conn) {
	up, err := net.Dial("tcp", p.upstream)
	if err != nil {
		down.Close()
		return
	}
	p.mu.Lock()
	p.conns[down], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, down)
		delete(p.conns, up)
		delete(p.held, down)
		p.mu.Unlock()
		down.Close()
		up.Close()
	}()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(up, down); done <- struct{}{} }()
	go func() {
		buf := make([]byte, 32<<10)
		for {
			n, err := up.Read(buf)
			if n > 0 && p.pass(down, buf[:n]) {
				if _, werr := down.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}()
	<-done
	down.Close()
	up.Close()
	<-done
}
