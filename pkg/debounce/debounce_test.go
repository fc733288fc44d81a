package debounce

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestConfigDefaults(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want Config
	}{
		{
			name: "default config",
			cfg:  DefaultConfig(),
			want: Config{DebounceAfter: 100 * time.Millisecond, DebounceMax: 10 * time.Second, EnableEDSDebounce: true, MaxBypassRanges: 64},
		},
		{
			name: "zero durations take the defaults",
			cfg:  Config{EnableEDSDebounce: true},
			want: Config{DebounceAfter: 100 * time.Millisecond, DebounceMax: 10 * time.Second, EnableEDSDebounce: true, MaxBypassRanges: 64},
		},
		{
			name: "negative durations take the defaults",
			cfg:  Config{DebounceAfter: -1, DebounceMax: -1},
			want: Config{DebounceAfter: 100 * time.Millisecond, DebounceMax: 10 * time.Second, MaxBypassRanges: 64},
		},
		{
			name: "set values are kept",
			cfg:  Config{DebounceAfter: time.Second, DebounceMax: time.Minute},
			want: Config{DebounceAfter: time.Second, DebounceMax: time.Minute, MaxBypassRanges: 64},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, New(tc.cfg).Config()); diff != "" {
				t.Errorf("Config() mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigKey(t *testing.T) {
	tests := []struct {
		name    string
		a, b    ConfigKey
		wantStr string
		wantCmp int
	}{
		{
			name:    "equal",
			a:       ConfigKey{Kind: "Service", Namespace: "ns", Name: "a"},
			b:       ConfigKey{Kind: "Service", Namespace: "ns", Name: "a"},
			wantStr: "Service/ns/a",
		},
		{
			name:    "kind first",
			a:       ConfigKey{Kind: "A", Namespace: "z", Name: "z"},
			b:       ConfigKey{Kind: "B", Namespace: "a", Name: "a"},
			wantStr: "A/z/z",
			wantCmp: -1,
		},
		{
			name:    "namespace before name",
			a:       ConfigKey{Kind: "A", Namespace: "b", Name: "a"},
			b:       ConfigKey{Kind: "A", Namespace: "a", Name: "b"},
			wantStr: "A/b/a",
			wantCmp: 1,
		},
		{
			name:    "cluster last",
			a:       ConfigKey{Kind: "A", Namespace: "a", Name: "a", Cluster: "c1"},
			b:       ConfigKey{Kind: "A", Namespace: "a", Name: "a", Cluster: "c2"},
			wantStr: "A/a/a@c1",
			wantCmp: -1,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.a.String(); got != tc.wantStr {
				t.Errorf("String() = %q, want %q", got, tc.wantStr)
			}
			if got := tc.a.Compare(tc.b); got != tc.wantCmp {
				t.Errorf("Compare() = %d, want %d", got, tc.wantCmp)
			}
		})
	}
}

// TestRequestContents checks every field of merged requests, and that a
// request handed out is never changed by later work (the debouncer reuses
// its own storage).
func TestRequestContents(t *testing.T) {
	ms := func(n int) time.Time { return epoch.Add(time.Duration(n) * time.Millisecond) }
	a := ConfigKey{Kind: "Service", Namespace: "ns", Name: "a"}
	b := ConfigKey{Kind: "Service", Namespace: "ns", Name: "b", Cluster: "c1"}
	type step struct {
		ev Event
		at int // ms
	}
	tests := []struct {
		name   string
		cfg    Config
		events []step
		tickAt int
		want   *Request
	}{
		{
			name:   "single endpoint event",
			cfg:    DefaultConfig(),
			events: []step{{ev: Event{Seq: 3, ConfigKeys: []ConfigKey{b}, Reason: "endpoint"}, at: 0}},
			tickAt: 100,
			want: &Request{
				ConfigKeys: []ConfigKey{b},
				Reasons:    map[string]int{"endpoint": 1},
				Start:      ms(0),
				FirstSeq:   3,
				ThroughSeq: 3,
				Merged:     1,
				Seqs:       []uint64{3},
				FirstAdded: ms(0),
			},
		},
		{
			name: "merged burst",
			cfg:  DefaultConfig(),
			events: []step{
				{ev: Event{Seq: 4, ConfigKeys: []ConfigKey{b}, Start: ms(-2)}, at: 0},
				{ev: Event{Seq: 2, Full: true, ConfigKeys: []ConfigKey{b, a}, Reason: "config", Start: ms(-20)}, at: 10},
				{ev: Event{Seq: 9, Reason: "config"}, at: 50},
			},
			tickAt: 150,
			want: &Request{
				Full:       true,
				ConfigKeys: []ConfigKey{a, b},
				Reasons:    map[string]int{"config": 2, "unknown": 1},
				Start:      ms(-20),
				FirstSeq:   2,
				ThroughSeq: 9,
				Merged:     3,
				Seqs:       []uint64{2, 4, 9},
				FirstAdded: ms(0),
			},
		},
		{
			name: "bypass and debounced batches due together",
			cfg:  Config{EnableEDSDebounce: false},
			events: []step{
				{ev: Event{Seq: 1, Full: true, ConfigKeys: []ConfigKey{a}, Reason: "config"}, at: 0},
				{ev: Event{Seq: 2, ConfigKeys: []ConfigKey{b}, Reason: "endpoint"}, at: 200},
			},
			tickAt: 200,
			want: &Request{
				Full:       true,
				ConfigKeys: []ConfigKey{a, b},
				Reasons:    map[string]int{"config": 1, "endpoint": 1},
				Start:      ms(0),
				FirstSeq:   1,
				ThroughSeq: 2,
				Merged:     2,
				Seqs:       []uint64{1, 2},
				FirstAdded: ms(0),
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := New(tc.cfg)
			for _, s := range tc.events {
				d.Add(s.ev, ms(s.at))
			}
			got, ok := d.Tick(ms(tc.tickAt))
			if !ok {
				t.Fatalf("Tick(%dms) emitted nothing", tc.tickAt)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Fatalf("request mismatch (-want +got):\n%s", diff)
			}
			// Reuse the debouncer's storage and check the request kept its
			// contents.
			d.Done(ms(tc.tickAt))
			for i := range 3 {
				d.Add(Event{Seq: uint64(100 + i), Full: true, ConfigKeys: []ConfigKey{{Kind: "X", Name: "y"}}, Reason: "other"}, ms(tc.tickAt+i))
			}
			if _, ok := d.Tick(ms(tc.tickAt + 1000)); !ok {
				t.Fatal("second request not emitted")
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("request changed by later work (-want +got):\n%s", diff)
			}
		})
	}
}
