package ads

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
)

// TestSetNamesShortcut: for random watches and requests (the same names
// shuffled, one swapped for a duplicate, one more or less, a wildcard,
// none), setNames leaves the watch as setNamesByCopy does and reports the
// same change; and an ACK repeating the watch's names allocates nothing.
func TestSetNamesShortcut(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	pool := make([]string, 40)
	for i := range pool {
		pool[i] = fmt.Sprintf("n%02d", i)
	}
	for i := range 5000 {
		typ := []string{resource.EndpointType, resource.ClusterType}[i%2]
		var start []string
		for _, n := range pool[:rng.IntN(len(pool))] {
			if rng.IntN(2) == 0 {
				start = append(start, n)
			}
		}
		if rng.IntN(8) == 0 {
			start = append(start, "*")
		}
		req := slices.Clone(start)
		req = slices.DeleteFunc(req, func(n string) bool { return n == "*" })
		switch rng.IntN(6) {
		case 0: // as kept
		case 1:
			rng.Shuffle(len(req), func(a, b int) { req[a], req[b] = req[b], req[a] })
		case 2:
			if len(req) > 1 {
				req[rng.IntN(len(req))] = req[0]
			}
		case 3:
			req = append(req, pool[rng.IntN(len(pool))])
		case 4:
			if len(req) > 0 {
				req = req[1:]
			}
		case 5:
			req = []string{"*"}
		}
		a, b := &watch{typeURL: typ}, &watch{typeURL: typ}
		a.setNamesByCopy(start)
		b.setNamesByCopy(start)
		wantChanged := a.setNamesByCopy(req)
		gotChanged := b.setNames(req)
		if gotChanged != wantChanged || a.wildcard != b.wildcard || a.named != b.named || !slices.Equal(a.names, b.names) {
			t.Fatalf("case %d: %v then %v: changed %v wildcard %v named %v names %v; oracle %v %v %v %v",
				i, start, req, gotChanged, b.wildcard, b.named, b.names, wantChanged, a.wildcard, a.named, a.names)
		}
	}

	w := &watch{typeURL: resource.EndpointType}
	w.setNames(slices.Clone(pool))
	shuffled := slices.Clone(pool)
	rng.Shuffle(len(shuffled), func(a, b int) { shuffled[a], shuffled[b] = shuffled[b], shuffled[a] })
	for _, ack := range [][]string{pool, shuffled} {
		if n := testing.AllocsPerRun(100, func() {
			if w.setNames(ack) {
				t.Fatal("an ACK changed the watch")
			}
		}); n != 0 {
			t.Errorf("an ACK of %d names took %v allocations", len(ack), n)
		}
	}
}

// TestNamesDigest: the digest is SHA-256 of each name followed by a zero
// byte, whatever the names' lengths against its buffer, and hashing a
// sidecar's names allocates only the key.
func TestNamesDigest(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for i := range 300 {
		var names []string
		for range rng.IntN(200) {
			names = append(names, strings.Repeat(string(rune('a'+rng.IntN(26))), rng.IntN(5000)))
		}
		h := sha256.New()
		for _, n := range names {
			h.Write([]byte(n))
			h.Write([]byte{0})
		}
		if got, want := namesDigest(names), string(h.Sum(nil)); got != want {
			t.Fatalf("case %d (%d names): digest %x, want %x", i, len(names), got, want)
		}
	}
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("outbound|80||svc-%03d.ns.svc.cluster.local", i)
	}
	if a := testing.AllocsPerRun(100, func() { namesDigest(names) }); a > 2 {
		t.Errorf("namesDigest of 100 names: %v allocations, want the hash and its key", a)
	}
}

// BenchmarkNamesDigest: the key of a sidecar's 100 load assignment names,
// computed once per subscription change.
func BenchmarkNamesDigest(b *testing.B) {
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("outbound|80||svc-%03d.ns.svc.cluster.local", i)
	}
	b.ReportAllocs()
	for b.Loop() {
		namesDigest(names)
	}
}
