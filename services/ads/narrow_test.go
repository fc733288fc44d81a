package ads

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestNarrowFromMatchesOnlyChanged: narrowing a shared response against
// an older one gives what narrowing against a connection's map of the
// older one's names and versions gives, from the first call and from the
// kept result, for more older responses than are kept.
func TestNarrowFromMatchesOnlyChanged(t *testing.T) {
	shared := func(versions ...string) *response {
		r := &response{version: fmt.Sprint(versions), id: responseIDs.Add(1)}
		for i, v := range versions {
			r.names = append(r.names, fmt.Sprintf("r%d", i))
			r.versions = append(r.versions, v)
			r.resources = append(r.resources, nil)
		}
		return r
	}
	cur := shared("a2", "b1", "c3", "d1")
	olds := []*response{
		shared("a1", "b1", "c3", "d1"), // one changed
		shared("a2", "b1", "c3", "d1"), // none
		shared("a1", "b0", "c0", "d0"), // all
		shared("a2", "b1"),             // two added
		shared("a2", "b1", "c3", "d1", "e1"),
		shared("a9", "b1", "c3", "d1"),
	}
	type result struct {
		Names   []string
		Any     bool
		Covered bool
	}
	want := func(prev *response) result {
		sent := map[string]string{}
		for i, n := range prev.names {
			sent[n] = prev.versions[i]
		}
		out, any := cur.onlyChanged(sent)
		covered := true
		for _, n := range prev.names {
			covered = covered && slices.Contains(cur.names, n)
		}
		return result{out.names, any, covered}
	}
	for round := range 2 { // the second round finds some kept, recomputes the rest
		for i, prev := range olds {
			out, any, covered := cur.narrowFrom(prev)
			if diff := cmp.Diff(want(prev), result{out.names, any, covered}); diff != "" {
				t.Errorf("round %d, older response %d (-onlyChanged +narrowFrom):\n%s", round, i, diff)
			}
		}
	}
	if kept := cur.narrowed.Load(); kept == nil || len(*kept) > maxNarrowings {
		t.Errorf("kept %v narrowings, want 1 to %d", kept, maxNarrowings)
	}
}

// TestSentStateMatchesAMap: what a watch holds as sent (a shared response
// alone, or a map) always says what a plain name -> version map updated
// on every send says, over random sends of whole and narrowed shared and
// single responses and forgotten names; and a watch that holds a shared
// response has no map of its own unless one was needed.
func TestSentStateMatchesAMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	respond := func() *response {
		r := &response{}
		if rng.IntN(4) > 0 {
			r.id, r.shared = responseIDs.Add(1), true
		}
		for i := range 6 {
			if rng.IntN(4) == 0 {
				continue // this resource is not in the response
			}
			r.names = append(r.names, fmt.Sprintf("r%d", i))
			r.versions = append(r.versions, fmt.Sprint(rng.IntN(3)))
			r.resources = append(r.resources, nil)
		}
		return r
	}
	// held is what the watch says it holds, without changing it.
	held := func(w *watch) map[string]string {
		if w.sentRes == nil && w.sentAs != nil {
			return w.sentAs.versionsByName()
		}
		return maps.Clone(w.sentRes)
	}
	for c := range 500 {
		w := &watch{}
		var ref map[string]string
		for step := range 30 {
			if ref != nil && rng.IntN(5) == 0 {
				n := fmt.Sprintf("r%d", rng.IntN(6))
				_, had := ref[n]
				delete(ref, n)
				if got := w.forgetSent(n); got != had {
					t.Fatalf("case %d step %d: forgetSent(%s) = %v, want %v", c, step, n, got, had)
				}
			} else {
				full := respond()
				r, covered := full, false
				if w.hasSent() {
					var any bool
					if r, any, covered = w.narrow(full); !any {
						continue // nothing sent
					}
				}
				if r == full || !w.hasSent() {
					ref = full.versionsByName()
					if ref == nil {
						ref = map[string]string{}
					}
					w.sentWhole(full)
				} else {
					for i, n := range r.names {
						ref[n] = r.versions[i]
					}
					w.sentNarrowed(full, r, covered)
				}
				if full.id != 0 && len(ref) == len(full.names) && w.sentAs != full {
					t.Fatalf("case %d step %d: the watch holds exactly shared response %d but does not say so", c, step, full.id)
				}
				if w.sentAs != nil && w.sentRes != nil {
					t.Fatalf("case %d step %d: a send left a map beside the shared response it stands for", c, step)
				}
			}
			if diff := cmp.Diff(ref, held(w)); diff != "" {
				t.Fatalf("case %d step %d: sent state (-map +watch):\n%s", c, step, diff)
			}
			if w.sentAs != nil && w.sentRes != nil && !maps.Equal(w.sentRes, w.sentAs.versionsByName()) {
				t.Fatalf("case %d step %d: the map and the shared response it stands for differ", c, step)
			}
		}
	}
}
