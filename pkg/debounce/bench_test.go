package debounce

import (
	"testing"
	"time"
)

// BenchmarkAddTick is the consumer loop's hot path during a long burst: one
// Add and one Tick per change, events 1ms apart, so the debounced request
// only goes out when the max window (10s, 10,000 events) closes.
func BenchmarkAddTick(b *testing.B) {
	d := New(DefaultConfig())
	keys := []ConfigKey{{Kind: "Service", Namespace: "ns", Name: "a"}}
	now := epoch
	b.ReportAllocs()
	var seq uint64
	for b.Loop() {
		seq++
		now = now.Add(time.Millisecond)
		d.Add(Event{Seq: seq, Full: true, ConfigKeys: keys, Reason: "config", Start: now}, now)
		if _, ok := d.Tick(now); ok {
			d.Done(now)
		}
	}
}

// BenchmarkAddTickEmit emits one request per change (events farther apart
// than the quiet window): the per-request cost.
func BenchmarkAddTickEmit(b *testing.B) {
	d := New(DefaultConfig())
	keys := []ConfigKey{{Kind: "Service", Namespace: "ns", Name: "a"}}
	now := epoch
	b.ReportAllocs()
	var seq uint64
	for b.Loop() {
		seq++
		d.Add(Event{Seq: seq, Full: true, ConfigKeys: keys, Reason: "config", Start: now}, now)
		now = now.Add(200 * time.Millisecond)
		if _, ok := d.Tick(now); !ok {
			b.Fatal("nothing emitted")
		}
		d.Done(now)
	}
}
