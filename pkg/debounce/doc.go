// Package debounce merges change events into push requests with the timing
// rules of Istio pilot's debounce loop, as a deterministic state machine.
//
// The Debouncer starts no goroutines, reads no clock and does no I/O: the
// caller (the debouncer service's consumer loop) feeds it events with Add,
// asks it for a request to publish with Tick, reports that the request was
// handed on with Done, and arms one timer at NextDeadline. Time only moves
// through the time.Time arguments, so every schedule can be replayed in a
// test.
//
// # Timing
//
// Events are merged into one pending request. The pending request is due
// when no event arrived for DebounceAfter (quiet since the last event) or
// when DebounceMax has passed since its first event, whichever comes first.
// The windows are measured with the now passed to Add (arrival time), as
// Istio measures them with time.Now() on receipt; Event.Start (observation
// time upstream) is carried along but never used for timing.
//
// # One request in flight
//
// After a request is emitted, nothing else is emitted until Done: the
// previous request must have been handed on (durably published) first.
// Meanwhile events keep merging into a new pending request whose windows
// start with its own first event. Done re-runs the check at once, so work
// that became due while a request was in flight goes out immediately.
//
// # EDS bypass
//
// With EnableEDSDebounce false, an endpoint-only event (Full false) skips
// debouncing, as in Istio, where such an event is pushed on its own at once
// and neither joins nor delays the debounced request. pilotwire keeps that
// separation: bypass events collect in their own batch, due immediately,
// which never touches the debounced batch's windows. One difference is
// forced by the one-in-flight rule: Istio pushes a bypass event even while a
// debounced push is running; here a bypass event that arrives while a request
// is in flight waits for Done (merging with other bypass events that arrive
// meanwhile) and goes out at once after it. When the debounced batch is also
// due at that moment, both go out as one request.
//
// A consequence worth knowing in the shell: with the bypass on, an endpoint
// event may be emitted before debounced events with lower sequences, so
// requests do not always cover a prefix of the change stream. Acknowledge
// per message (Request.Seqs), and tell consumers which sequences a request
// carries (the service publishes them as covered ranges and
// complete_through_seq). With the bypass off (the default) every request
// covers exactly the events added since the previous one.
package debounce
