package natstest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// DropProxy forwards TCP connections to one upstream. While dropping, what
// the upstream sends is read and thrown away, as bytes in flight are when
// a connection dies; Cut closes every connection (new ones forward again).
type DropProxy struct {
	ln       net.Listener
	upstream string
	mu       sync.Mutex
	dropping bool
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
	p := &DropProxy{ln: ln, upstream: upstream, conns: map[net.Conn]struct{}{}}
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

func (p *DropProxy) isDropping() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.dropping }

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
			if n > 0 && !p.isDropping() {
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
