package faults

import (
	"io"
	"net"
	"testing"
)

// upstream accepts connections and writes its name on each.
func upstream(t *testing.T, name string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte(name))
			c.Close()
		}
	}()
	return ln.Addr().String()
}

// TestBalancerSpreadsAndSkipsARefusingUpstream: the Service in front of the
// frontends starts each connection at the next upstream and passes over
// one that refuses (a killed frontend), so no connection is lost to it.
func TestBalancerSpreadsAndSkipsARefusingUpstream(t *testing.T) {
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close() // refuses from now on
	lb, err := newBalancer("127.0.0.1:0", []string{upstream(t, "a"), deadAddr, upstream(t, "c")})
	if err != nil {
		t.Fatal(err)
	}
	defer lb.close()
	got := map[string]int{}
	for range 6 {
		c, err := net.Dial("tcp", lb.addr())
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(c)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		got[string(b)]++
	}
	// Starts at a, dead (so c), c, a, dead (c), c: a twice, c four times.
	if got["a"] != 2 || got["c"] != 4 || len(got) != 2 {
		t.Errorf("connections by upstream = %v, want a:2 c:4", got)
	}
}
