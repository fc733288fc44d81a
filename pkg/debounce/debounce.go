package debounce

import "time"

// Debouncer merges events into requests; see the package comment for the
// rules. It is not safe for concurrent use: one loop owns it.
type Debouncer struct {
	// set at construction
	cfg Config

	// owned by the caller's loop
	debounced batch // events subject to the windows
	bypass    batch // endpoint-only events when EDS debounce is off; due at once
	inFlight  bool  // a request was emitted and Done was not called yet
}

// New returns a Debouncer with cfg's windows (unset durations take the
// defaults).
func New(cfg Config) *Debouncer {
	return &Debouncer{cfg: cfg.withDefaults()}
}

// Config returns the configuration in use, defaults filled in.
func (d *Debouncer) Config() Config { return d.cfg }

// Add merges ev, which arrived at now, into the pending work. It never
// emits: call Tick afterwards.
func (d *Debouncer) Add(ev Event, now time.Time) {
	if !d.cfg.EnableEDSDebounce && !ev.Full {
		d.bypass.add(ev, now)
		return
	}
	d.debounced.add(ev, now)
}

// Tick returns the request to publish at now, if any. A request is returned
// when nothing is in flight and pending work is due: bypass events at once,
// debounced events when their quiet or max window has closed. Work that is
// due at the same time goes out as one request. After a request is
// returned, the Debouncer is in flight until Done.
func (d *Debouncer) Tick(now time.Time) (*Request, bool) {
	if d.inFlight {
		return nil, false
	}
	debouncedDue := d.debounced.due(now, d.cfg.DebounceAfter, d.cfg.DebounceMax)
	// A bypass batch broken into too many runs by debounced events between
	// its sequences takes the debounced batch along: the request then
	// carries every pending sequence, so its ranges join into few.
	fragmented := d.bypass.runs() > d.cfg.MaxBypassRanges && d.debounced.n > 0
	var req *Request
	switch {
	case d.bypass.n > 0 && (debouncedDue || fragmented):
		req = d.debounced.emit(&d.bypass)
	case d.bypass.n > 0:
		req = d.bypass.emit(nil)
	case debouncedDue:
		req = d.debounced.emit(nil)
	default:
		return nil, false
	}
	d.inFlight = true
	return req, true
}

// Done reports that the request in flight was handed on, then runs Tick at
// now: whatever became due meanwhile is returned at once. Calling Done when
// nothing is in flight only runs Tick.
func (d *Debouncer) Done(now time.Time) (*Request, bool) {
	d.inFlight = false
	return d.Tick(now)
}

// NextDeadline is when Tick should next be called: the earliest time at
// which pending work becomes due. It reports false when nothing is pending
// or a request is in flight (Done runs the check then). A deadline in the
// past means "now".
func (d *Debouncer) NextDeadline() (time.Time, bool) {
	switch {
	case d.inFlight:
		return time.Time{}, false
	case d.bypass.n > 0:
		return d.bypass.first, true
	case d.debounced.n > 0:
		return d.debounced.deadline(d.cfg.DebounceAfter, d.cfg.DebounceMax), true
	default:
		return time.Time{}, false
	}
}

// Pending is the number of events added and not yet emitted.
func (d *Debouncer) Pending() int { return d.debounced.n + d.bypass.n }
