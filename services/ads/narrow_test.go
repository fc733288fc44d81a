package ads

import (
	"fmt"
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
		Names []string
		Any   bool
	}
	want := func(prev *response) result {
		sent := map[string]string{}
		for i, n := range prev.names {
			sent[n] = prev.versions[i]
		}
		out, any := cur.onlyChanged(sent)
		return result{out.names, any}
	}
	for round := range 2 { // the second round finds some kept, recomputes the rest
		for i, prev := range olds {
			out, any := cur.narrowFrom(prev)
			if diff := cmp.Diff(want(prev), result{out.names, any}); diff != "" {
				t.Errorf("round %d, older response %d (-onlyChanged +narrowFrom):\n%s", round, i, diff)
			}
		}
	}
	if kept := cur.narrowed.Load(); kept == nil || len(*kept) > maxNarrowings {
		t.Errorf("kept %v narrowings, want 1 to %d", kept, maxNarrowings)
	}
}
