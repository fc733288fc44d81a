package filesource

import (
	"slices"
	"strings"
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

// TestCoalescerPopWhere: popWhere takes matching keys whether due or not,
// and leaves the rest pending.
func TestCoalescerPopWhere(t *testing.T) {
	t0 := time.Unix(0, 0)
	c := newCoalescer[string](10*time.Millisecond, time.Second)
	c.touch("dir:a", t0)
	c.touch("dir:b", t0.Add(9*time.Millisecond))
	c.touch("file:c", t0)
	got := c.popWhere(func(k string) bool { return strings.HasPrefix(k, "dir:") })
	slices.Sort(got)
	if diff := cmp.Diff([]string{"dir:a", "dir:b"}, got); diff != "" {
		t.Errorf("popWhere (-want +got):\n%s", diff)
	}
	if c.len() != 1 {
		t.Errorf("%d keys left, want file:c only", c.len())
	}
}
