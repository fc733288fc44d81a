package model

import (
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPodUsers drives podUsers and a plain map of counts with the same
// random adds and removals (a slice's endpoints added, later removed) and
// compares the services each reports for every pod.
func TestPodUsers(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	got := make(podUsers)
	want := make(map[podKey]map[serviceKey]int)
	pods := []podKey{{Name: "p0"}, {Name: "p1"}, {Name: "p2"}}
	svcs := []serviceKey{{Name: "a"}, {Name: "b"}, {Name: "c"}}
	type use struct {
		pk podKey
		sk serviceKey
	}
	var live []use
	for step := range 5000 {
		if len(live) > 0 && r.IntN(2) == 0 {
			i := r.IntN(len(live))
			u := live[i]
			live = append(live[:i], live[i+1:]...)
			got.add(u.pk, u.sk, -1)
			if want[u.pk][u.sk]--; want[u.pk][u.sk] == 0 {
				delete(want[u.pk], u.sk)
			}
		} else {
			u := use{pods[r.IntN(len(pods))], svcs[r.IntN(len(svcs))]}
			live = append(live, u)
			got.add(u.pk, u.sk, 1)
			if want[u.pk] == nil {
				want[u.pk] = make(map[serviceKey]int)
			}
			want[u.pk][u.sk]++
		}
		for _, pk := range pods {
			seen := make(map[serviceKey]bool)
			got.each(pk, func(sk serviceKey) { seen[sk] = true })
			exp := make(map[serviceKey]bool)
			for sk := range want[pk] {
				exp[sk] = true
			}
			if d := cmp.Diff(exp, seen); d != "" {
				t.Fatalf("step %d, pod %v (-want +got):\n%s", step, pk, d)
			}
			if _, ok := got[pk]; ok != (len(want[pk]) > 0) {
				t.Fatalf("step %d, pod %v: entry kept %v with %d users", step, pk, ok, len(want[pk]))
			}
		}
	}
}
