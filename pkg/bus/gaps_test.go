package bus

import "testing"

func TestDeliveryGaps(t *testing.T) {
	type step struct {
		d, s     uint64
		from, to uint64
		gap      bool
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"in order", []step{{d: 7, s: 40}, {d: 8, s: 41}, {d: 9, s: 45}}}, // a term starts anywhere; stream gaps alone are purged requests
		{"two lost", []step{{d: 1, s: 10}, {d: 4, s: 13, from: 10, to: 13, gap: true}, {d: 5, s: 14}}},
		{"a lost redelivery", []step{{d: 1, s: 10}, {d: 2, s: 11}, {d: 4, s: 12}}},
		{"numbers going back", []step{{d: 5, s: 10}, {d: 3, s: 11}, {d: 6, s: 12}, {d: 8, s: 14, from: 12, to: 14, gap: true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var g DeliveryGaps
			for i, st := range tc.steps {
				from, to, gap := g.Next(st.d, st.s)
				if gap != st.gap || (gap && (from != st.from || to != st.to)) {
					t.Errorf("step %d (delivery %d, seq %d): gap %v (%d, %d), want %v (%d, %d)", i, st.d, st.s, gap, from, to, st.gap, st.from, st.to)
				}
			}
		})
	}
}
