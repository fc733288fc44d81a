package filesource

import (
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCoalescer(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	type touch struct {
		key string
		at  int // ms
	}
	tests := []struct {
		name    string
		touches []touch
		popAt   int
		wantDue []string
		wantNxt int // ms of the next due after popping, -1 for none
	}{
		{
			name:    "nothing pending",
			popAt:   1000,
			wantNxt: -1,
		},
		{
			name:    "quiet period not over",
			touches: []touch{{"a", 0}, {"a", 50}},
			popAt:   120,
			wantNxt: 150,
		},
		{
			name:    "burst coalesces to one",
			touches: []touch{{"a", 0}, {"a", 30}, {"a", 60}},
			popAt:   160,
			wantDue: []string{"a"},
			wantNxt: -1,
		},
		{
			name:    "keys are independent",
			touches: []touch{{"a", 0}, {"b", 80}},
			popAt:   100,
			wantDue: []string{"a"},
			wantNxt: 180,
		},
		{
			name:    "continuous touches are capped by max delay",
			touches: []touch{{"a", 0}, {"a", 90}, {"a", 180}, {"a", 270}, {"a", 360}, {"a", 450}},
			popAt:   500,
			wantDue: []string{"a"},
			wantNxt: -1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := newCoalescer[string](100*time.Millisecond, 500*time.Millisecond)
			for _, tt := range tc.touches {
				c.touch(tt.key, ms(tt.at))
			}
			got := c.popDue(ms(tc.popAt))
			slices.Sort(got)
			if diff := cmp.Diff(tc.wantDue, got); diff != "" {
				t.Errorf("due (-want +got):\n%s", diff)
			}
			at, ok := c.next()
			switch {
			case tc.wantNxt < 0 && ok:
				t.Errorf("next = %v, want none", at.Sub(t0))
			case tc.wantNxt >= 0 && (!ok || !at.Equal(ms(tc.wantNxt))):
				t.Errorf("next = %v (%v), want %dms", at.Sub(t0), ok, tc.wantNxt)
			}
		})
	}
}
