package model

import (
	"fmt"
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

// TestUsersIndexBuiltLate: a store that builds its pod and node users
// index only when the first pod or node comes builds the same meshes, after
// every record of random histories of services, slices naming pods and
// nodes, pods and nodes, as a store that keeps the index from the start.
func TestUsersIndexBuiltLate(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	zones := []map[string]any{
		{LabelRegion: "r1", LabelZone: "z1"},
		{LabelRegion: "r2", LabelZone: "z2"},
	}
	pods := []string{"p0", "p1", "p2", "p3"}
	nodes := []string{"n0", "n1"}
	record := func() rec {
		op := add
		if r.IntN(4) == 0 {
			op = del
		}
		switch r.IntN(4) {
		case 0:
			return op("c1", podOnNode("ns", pods[r.IntN(len(pods))], nodes[r.IntN(len(nodes))], map[string]any{"app": []string{"a", "b"}[r.IntN(2)], LabelLocality: []string{"", "rx.zx"}[r.IntN(2)]}))
		case 1:
			return op("c1", nodeObj(nodes[r.IntN(len(nodes))], zones[r.IntN(len(zones))]))
		case 2:
			var eps []ep
			for i := range r.IntN(3) + 1 {
				eps = append(eps, ep{addr: fmt.Sprintf("10.0.0.%d", i+1), node: pods[r.IntN(len(pods))]})
			}
			svc := []string{"web", "api"}[r.IntN(2)]
			sl := podSlice("ns", fmt.Sprintf("%s-%d", svc, r.IntN(2)), svc, eps...)
			if r.IntN(2) == 0 {
				sl.Endpoints[0].NodeName = ptr(nodes[r.IntN(len(nodes))])
			}
			return op("c1", sl)
		default:
			return op("c1", service("ns", []string{"web", "api"}[r.IntN(2)], "10.9.0.1", svcPort{name: "http", port: 80}))
		}
	}
	for history := range 200 {
		late, early := NewStore(), NewStore()
		early.indexUsers()
		for i := range 1 + r.IntN(30) {
			rc := record()
			applyAll(t, late, rc)
			applyAll(t, early, rc)
			want, got := early.Snapshot(), late.Snapshot()
			if d := cmp.Diff(want.Services, got.Services, ignoreMemo); d != "" {
				t.Fatalf("history %d, record %d: (-index from the start +index built late):\n%s", history, i, d)
			}
			for _, svc := range want.Services {
				if d := cmp.Diff(localitiesOf(want, svc.Hostname), localitiesOf(got, svc.Hostname)); d != "" {
					t.Fatalf("history %d, record %d, %s localities (-index from the start +index built late):\n%s", history, i, svc.Hostname, d)
				}
			}
		}
	}
}
