package debounce

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// fuzzEvents decodes events, four bytes each: sequence, flags (bit 0:
// full, bits 1-2: start before, at or unset relative to the add), key and
// reason. Keys and reasons come from small sets so that merges overlap.
func fuzzEvents(data []byte) (evs []Event, at []time.Time) {
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	keys := []ConfigKey{
		{Kind: "Service", Namespace: "a", Name: "x"},
		{Kind: "Service", Namespace: "a", Name: "x", Cluster: "c2"},
		{Kind: "VirtualService", Namespace: "a", Name: "x"},
		{Kind: "Service", Namespace: "b", Name: "y"},
	}
	reasons := []string{"", "endpoint", "config", "service"}
	for i := 0; i+4 <= len(data) && len(evs) < 64; i += 4 {
		now := base.Add(time.Duration(len(evs)) * time.Millisecond)
		ev := Event{Seq: uint64(data[i]), Full: data[i+1]&1 == 1, Reason: reasons[data[i+3]%4]}
		switch (data[i+1] >> 1) % 3 {
		case 0:
			ev.Start = now.Add(-time.Duration(data[i+2]) * time.Millisecond)
		case 1:
			ev.Start = now
		}
		for k := range keys {
			if data[i+2]&(1<<k) != 0 {
				ev.ConfigKeys = append(ev.ConfigKeys, keys[k])
			}
		}
		evs = append(evs, ev)
		at = append(at, now)
	}
	return evs, at
}

func fill(evs []Event, at []time.Time) *batch {
	b := &batch{}
	for i, ev := range evs {
		b.add(ev, at[i])
	}
	return b
}

// FuzzBatchMerge checks the debouncer's merge of PushRequests: however the
// events are split into batches and in whatever grouping the batches are
// merged, the request is the same, and it is the merge of exactly its
// events: no config key or sequence lost, full if any event was, every
// reason counted, the earliest start kept.
func FuzzBatchMerge(f *testing.F) {
	f.Add([]byte{1, 0, 1, 1, 2, 1, 2, 0, 3, 2, 8, 2}, uint8(1), uint8(2))
	f.Add([]byte{5, 0, 3, 1, 5, 0, 3, 1, 4, 4, 0, 3, 9, 1, 15, 0}, uint8(0), uint8(4))
	f.Add([]byte{7, 3, 1, 0, 1, 2, 2, 1, 200, 0, 4, 2, 0, 0, 0, 0, 3, 5, 8, 3}, uint8(3), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, cut1, cut2 uint8) {
		evs, at := fuzzEvents(data)
		if len(evs) == 0 {
			return
		}
		i, j := int(cut1)%(len(evs)+1), int(cut2)%(len(evs)+1)
		if i > j {
			i, j = j, i
		}
		parts := func() (a, b, c *batch) {
			return fill(evs[:i], at[:i]), fill(evs[i:j], at[i:j]), fill(evs[j:], at[j:])
		}
		whole := fill(evs, at).emit(nil)

		a, b, c := parts() // (a+b)+c
		a.absorb(b)
		left := a.emit(c)

		a, b, c = parts() // a+(b+c)
		b.absorb(c)
		right := a.emit(b)

		a, b, c = parts() // (c+b)+a: merge order does not matter either
		c.absorb(b)
		c.absorb(a)
		reversed := c.emit(nil)

		for name, got := range map[string]*Request{"(a+b)+c": left, "a+(b+c)": right, "(c+b)+a": reversed} {
			if d := cmp.Diff(whole, got); d != "" {
				t.Fatalf("split at %d,%d: %s differs from one batch (-want +got):\n%s", i, j, name, d)
			}
		}

		// The request is the merge of exactly its events.
		want := &Request{Reasons: map[string]int{}, Merged: len(evs), FirstSeq: evs[0].Seq, FirstAdded: at[0]}
		keys := map[ConfigKey]bool{}
		for n, ev := range evs {
			want.Full = want.Full || ev.Full
			for _, k := range ev.ConfigKeys {
				keys[k] = true
			}
			r := ev.Reason
			if r == "" {
				r = UnknownReason
			}
			want.Reasons[r]++
			start := ev.Start
			if start.IsZero() {
				start = at[n]
			}
			if want.Start.IsZero() || start.Before(want.Start) {
				want.Start = start
			}
			want.FirstSeq = min(want.FirstSeq, ev.Seq)
			want.ThroughSeq = max(want.ThroughSeq, ev.Seq)
			want.Seqs = append(want.Seqs, ev.Seq)
		}
		for k := range keys {
			want.ConfigKeys = append(want.ConfigKeys, k)
		}
		slices.SortFunc(want.ConfigKeys, ConfigKey.Compare)
		slices.Sort(want.Seqs)
		if d := cmp.Diff(want, whole); d != "" {
			t.Fatalf("request is not the merge of its events (-want +got):\n%s", d)
		}
	})
}
