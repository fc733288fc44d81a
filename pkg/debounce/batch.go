package debounce

import (
	"slices"
	"time"
)

// batch accumulates events until they are emitted as one Request.
type batch struct {
	n     int       // events merged; 0 means empty
	first time.Time // when the first event was added
	last  time.Time // when the latest event was added

	full     bool
	keys     map[ConfigKey]struct{} // reused across batches
	reasons  map[string]int         // handed to the Request on emit
	start    time.Time
	seqs     []uint64 // handed to the Request on emit
	firstSeq uint64
	thruSeq  uint64
	lastSeq  uint64 // the latest event's sequence
	breaks   int    // events whose sequence does not follow the previous one's
}

// runs is the number of runs of consecutive sequences the batch's events
// form, in arrival (stream) order.
func (b *batch) runs() int {
	if b.n == 0 {
		return 0
	}
	return b.breaks + 1
}

// add merges ev, added at now, into the batch.
func (b *batch) add(ev Event, now time.Time) {
	start := ev.Start
	if start.IsZero() {
		start = now
	}
	reason := ev.Reason
	if reason == "" {
		reason = UnknownReason
	}
	if b.n == 0 {
		b.first = now
		b.start = start
		b.firstSeq = ev.Seq
		b.thruSeq = ev.Seq
	} else {
		if start.Before(b.start) {
			b.start = start
		}
		b.firstSeq = min(b.firstSeq, ev.Seq)
		b.thruSeq = max(b.thruSeq, ev.Seq)
	}
	if b.n > 0 && ev.Seq != b.lastSeq && ev.Seq != b.lastSeq+1 {
		b.breaks++
	}
	b.lastSeq = ev.Seq
	b.n++
	b.last = now
	b.full = b.full || ev.Full
	if len(ev.ConfigKeys) > 0 && b.keys == nil {
		b.keys = make(map[ConfigKey]struct{}, len(ev.ConfigKeys))
	}
	for _, k := range ev.ConfigKeys {
		b.keys[k] = struct{}{}
	}
	if b.reasons == nil {
		b.reasons = make(map[string]int, 1)
	}
	b.reasons[reason]++
	b.seqs = append(b.seqs, ev.Seq)
}

// due reports whether the batch's windows have closed at now.
func (b *batch) due(now time.Time, after, maxWait time.Duration) bool {
	return b.n > 0 && (now.Sub(b.last) >= after || now.Sub(b.first) >= maxWait)
}

// deadline is when the batch becomes due: the end of the quiet window or
// of the max window, whichever is first.
func (b *batch) deadline(after, maxWait time.Duration) time.Time {
	quiet := b.last.Add(after)
	if hard := b.first.Add(maxWait); hard.Before(quiet) {
		return hard
	}
	return quiet
}

// emit turns the batch, merged with other if other is not nil, into a
// Request and empties both.
func (b *batch) emit(other *batch) *Request {
	if other != nil && other.n > 0 {
		b.absorb(other)
		other.reset()
	}
	req := &Request{
		Full:       b.full,
		Reasons:    b.reasons,
		Start:      b.start,
		FirstSeq:   b.firstSeq,
		ThroughSeq: b.thruSeq,
		Merged:     b.n,
		Seqs:       b.seqs,
		FirstAdded: b.first,
	}
	if len(b.keys) > 0 {
		req.ConfigKeys = make([]ConfigKey, 0, len(b.keys))
		for k := range b.keys {
			req.ConfigKeys = append(req.ConfigKeys, k)
		}
		slices.SortFunc(req.ConfigKeys, ConfigKey.Compare)
	}
	slices.Sort(req.Seqs)
	b.reasons = nil
	b.seqs = nil
	b.reset()
	return req
}

// absorb merges o into b, keeping b's storage.
func (b *batch) absorb(o *batch) {
	if o.n == 0 {
		return
	}
	if b.n == 0 {
		b.first, b.last = o.first, o.last
		b.start = o.start
		b.firstSeq, b.thruSeq = o.firstSeq, o.thruSeq
	} else {
		if o.first.Before(b.first) {
			b.first = o.first
		}
		if o.last.After(b.last) {
			b.last = o.last
		}
		if o.start.Before(b.start) {
			b.start = o.start
		}
		b.firstSeq = min(b.firstSeq, o.firstSeq)
		b.thruSeq = max(b.thruSeq, o.thruSeq)
	}
	b.breaks += o.breaks + 1
	b.lastSeq = max(b.lastSeq, o.lastSeq)
	b.n += o.n
	b.full = b.full || o.full
	if len(o.keys) > 0 && b.keys == nil {
		b.keys = make(map[ConfigKey]struct{}, len(o.keys))
	}
	for k := range o.keys {
		b.keys[k] = struct{}{}
	}
	if b.reasons == nil {
		b.reasons = make(map[string]int, len(o.reasons))
	}
	for r, c := range o.reasons {
		b.reasons[r] += c
	}
	b.seqs = append(b.seqs, o.seqs...)
}

// reset empties the batch, keeping its maps and slice for reuse.
func (b *batch) reset() {
	clear(b.keys)
	clear(b.reasons)
	*b = batch{keys: b.keys, reasons: b.reasons, seqs: b.seqs[:0]}
}
