package model

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestParallelBuildMatchesSerial: a rebuild with many dirty services (the
// first snapshot of a replay, then a change that touches every service)
// gives the same mesh with its builds spread over goroutines as on one,
// destination rules included. Run with -race, it also checks that the
// workers only read the store.
func TestParallelBuildMatchesSerial(t *testing.T) {
	const n = 4 * parallelBuildShare // enough for 4 workers
	var recs []rec
	for i := range n {
		name := fmt.Sprintf("svc-%04d", i)
		ns := fmt.Sprintf("ns-%d", i%7)
		eps := make([]ep, 3)
		for j := range eps {
			eps[j] = ep{addr: fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1), node: fmt.Sprintf("%s-%d", name, j)}
			recs = append(recs, add("c1", podObj(ns, eps[j].node, map[string]any{"app": name, "version": fmt.Sprintf("v%d", j%2+1)})))
		}
		switch i % 5 {
		case 0: // a slice without its Service: built as nothing
			recs = append(recs, add("c1", podSlice(ns, name+"-abc", name, eps...)))
		case 1: // a Service without endpoints
			recs = append(recs, add("c1", service(ns, name, fmt.Sprintf("10.96.%d.%d", i/250, i%250), svcPort{name: "http", port: 80})))
		default:
			recs = append(recs,
				add("c1", service(ns, name, fmt.Sprintf("10.96.%d.%d", i/250, i%250), svcPort{name: "http", port: 80})),
				add("c1", podSlice(ns, name+"-abc", name, eps...)),
			)
		}
		if i%3 == 0 {
			r := benchRule(name, "ROUND_ROBIN")
			r.namespace = ns
			r.body["metadata"].(map[string]any)["namespace"] = ns
			recs = append(recs, add("c1", r))
		}
	}
	// A wildcard rule in the root namespace: every service matches it.
	recs = append(recs, add("c1", istioObj(KindDestinationRule, "istio-system", "root", "2024-01-01T00:00:00Z",
		map[string]any{"host": "*.svc.cluster.local"})))

	serial := NewStore(WithBuildWorkers(1))
	parallel := NewStore(WithBuildWorkers(4))
	compare := func(step string) {
		t.Helper()
		want, got := serial.Snapshot(), parallel.Snapshot()
		if len(want.Services) < n/2 {
			t.Fatalf("%s: %d services, want at least %d", step, len(want.Services), n/2)
		}
		if diff := cmp.Diff(want.Services, got.Services, ignoreMemo); diff != "" {
			t.Fatalf("%s: services (-serial +parallel):\n%s", step, diff)
		}
		for i, w := range want.Services {
			if diff := cmp.Diff(ruleNames(w), ruleNames(got.Services[i])); diff != "" {
				t.Fatalf("%s: rules of %s (-serial +parallel):\n%s", step, w.Hostname, diff)
			}
		}
	}
	for _, s := range []*Store{serial, parallel} {
		applyAll(t, s, recs...)
	}
	compare("replay")

	// Every service again: each slice's first endpoint moves.
	var moved []rec
	for i := range n {
		if i%5 == 1 {
			continue
		}
		name := fmt.Sprintf("svc-%04d", i)
		ns := fmt.Sprintf("ns-%d", i%7)
		moved = append(moved, upd("c1", podSlice(ns, name+"-abc", name,
			ep{addr: fmt.Sprintf("10.%d.%d.99", i/250, i%250), node: name + "-0"})))
	}
	for _, s := range []*Store{serial, parallel} {
		applyAll(t, s, moved...)
	}
	compare("every slice moved")
}

func ruleNames(s *Service) []string {
	var out []string
	for _, r := range s.rules {
		out = append(out, r.Namespace+"/"+r.Name)
	}
	return out
}
