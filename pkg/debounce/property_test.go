package debounce

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// TestPropertyRandomSchedules drives the Debouncer the way the shell does
// (Tick after every Add, a timer at NextDeadline, Done some time after each
// emit) plus stray ticks at random times, over random event sequences and
// configs, and checks after every step:
//
//   - at most one request is in flight, and nothing is emitted while one is;
//   - every event is in exactly one request, and all are emitted in the end;
//   - nothing is emitted early: the debounced part of a request is emitted
//     only once its quiet or max window has closed;
//   - nothing is emitted late: a request goes out at its due time, or at
//     the Done that freed the debouncer if that came later; so with nothing
//     in flight, emit time - first event time <= DebounceMax;
//   - each request's fields are the merge of exactly its events;
//   - without the EDS bypass, each request holds exactly the events added
//     since the previous one;
//   - Pending, InFlight and OldestPendingSeq agree with the shell's view.
func TestPropertyRandomSchedules(t *testing.T) {
	seeds := 2000
	if testing.Short() {
		seeds = 200
	}
	for seed := range uint64(seeds) {
		if err := simulate(seed); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

type simEvent struct {
	ev     Event
	at     time.Time
	bypass bool
}

type simShell struct {
	d      *Debouncer
	cfg    Config
	events map[uint64]simEvent // by seq

	pending   []uint64 // added, not yet emitted, in add order
	emitted   map[uint64]bool
	inFlight  bool
	doneAt    time.Time // when the in-flight request will be Done
	freedAt   time.Time // when the last Done freed the debouncer
	latencies func() time.Duration
}

func simulate(seed uint64) error {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	cfg := Config{
		DebounceAfter:     ms(1 + rng.IntN(100)),
		EnableEDSDebounce: rng.IntN(2) == 0,
	}
	switch rng.IntN(3) {
	case 0: // max shorter than after: only the max window matters
		cfg.DebounceMax = ms(1 + rng.IntN(int(cfg.DebounceAfter/time.Millisecond)))
	default:
		cfg.DebounceMax = cfg.DebounceAfter * time.Duration(1+rng.IntN(20))
	}
	maxLatency := 1 + rng.IntN(3*int(cfg.DebounceAfter/time.Millisecond))

	// Random events: gaps mixing bursts, drips and quiet periods.
	n := 1 + rng.IntN(300)
	var evs []simEvent
	now := epoch
	seqs := rng.Perm(n) // arrival order need not follow seq order
	if rng.IntN(2) == 0 {
		slices.Sort(seqs)
	}
	for i := range n {
		switch rng.IntN(4) {
		case 0:
		case 1, 2:
			now = now.Add(time.Duration(rng.Int64N(int64(cfg.DebounceAfter))))
		case 3:
			now = now.Add(time.Duration(rng.Int64N(3 * int64(cfg.DebounceAfter))))
		}
		ev := Event{
			Seq:    uint64(seqs[i]) + 1,
			Full:   rng.IntN(3) == 0,
			Reason: []string{"", "config", "endpoint", "secret"}[rng.IntN(4)],
		}
		for range rng.IntN(3) {
			ev.ConfigKeys = append(ev.ConfigKeys, ConfigKey{Kind: "K", Namespace: "ns", Name: fmt.Sprint(rng.IntN(10))})
		}
		if rng.IntN(2) == 0 {
			ev.Start = now.Add(-time.Duration(rng.Int64N(int64(time.Second))))
		}
		evs = append(evs, simEvent{ev: ev, at: now, bypass: !cfg.EnableEDSDebounce && !ev.Full})
	}
	// Stray ticks at random times, which must never cause an early emit.
	var strays []time.Time
	end := now.Add(cfg.DebounceMax + cfg.DebounceAfter)
	for range rng.IntN(50) {
		strays = append(strays, epoch.Add(time.Duration(rng.Int64N(int64(end.Sub(epoch))+1))))
	}
	slices.SortFunc(strays, time.Time.Compare)

	s := &simShell{
		d:       New(cfg),
		cfg:     cfg,
		events:  map[uint64]simEvent{},
		emitted: map[uint64]bool{},
		latencies: func() time.Duration {
			if rng.IntN(4) == 0 {
				return 0
			}
			return ms(rng.IntN(maxLatency))
		},
	}
	for _, e := range evs {
		s.events[e.ev.Seq] = e
	}

	clock := epoch
	for steps := 0; ; steps++ {
		if steps > 100000 {
			return fmt.Errorf("simulation does not end")
		}
		// Next action: the earliest of the next event, the deadline timer,
		// the in-flight Done and the next stray tick.
		const (
			none = iota
			addEv
			deadline
			done
			stray
		)
		kind, at := none, time.Time{}
		consider := func(k int, t time.Time) {
			if kind == none || t.Before(at) {
				kind, at = k, t
			}
		}
		if len(evs) > 0 {
			consider(addEv, evs[0].at)
		}
		if s.inFlight {
			consider(done, s.doneAt)
		}
		if dl, ok := s.d.NextDeadline(); ok {
			consider(deadline, dl)
		}
		if len(strays) > 0 {
			consider(stray, strays[0])
		}
		if kind == none {
			break
		}
		if at.After(clock) {
			clock = at
		}
		var req *Request
		var ok bool
		switch kind {
		case addEv:
			e := evs[0]
			evs = evs[1:]
			s.d.Add(e.ev, clock)
			s.pending = append(s.pending, e.ev.Seq)
			req, ok = s.d.Tick(clock)
		case deadline:
			req, ok = s.d.Tick(clock)
			if !ok && !s.inFlight {
				return fmt.Errorf("at %v: tick at the deadline emitted nothing", clock.Sub(epoch))
			}
		case done:
			s.inFlight = false
			s.freedAt = clock
			req, ok = s.d.Done(clock)
		case stray:
			strays = strays[1:]
			req, ok = s.d.Tick(clock)
		}
		if ok != (req != nil) {
			return fmt.Errorf("ok=%v with request %v", ok, req)
		}
		if ok {
			if err := s.check(req, clock); err != nil {
				return fmt.Errorf("at %v: %v", clock.Sub(epoch), err)
			}
		}
		if err := s.checkState(); err != nil {
			return fmt.Errorf("at %v: %v", clock.Sub(epoch), err)
		}
	}
	if len(s.pending) != 0 || len(s.emitted) != len(s.events) {
		return fmt.Errorf("ended with %d pending, %d of %d emitted", len(s.pending), len(s.emitted), len(s.events))
	}
	return nil
}

// check verifies an emitted request against the shell's view.
func (s *simShell) check(req *Request, now time.Time) error {
	if s.inFlight {
		return fmt.Errorf("emitted while a request is in flight")
	}
	if err := checkRequest(req); err != nil {
		return err
	}
	// Exactly once, and the merge of exactly these events.
	want := Request{Reasons: map[string]int{}, Merged: len(req.Seqs), Seqs: req.Seqs}
	keys := map[ConfigKey]bool{}
	var debounced []simEvent
	var bypassFirst time.Time
	for i, seq := range req.Seqs {
		e, known := s.events[seq]
		switch {
		case !known:
			return fmt.Errorf("unknown seq %d", seq)
		case s.emitted[seq]:
			return fmt.Errorf("seq %d emitted twice", seq)
		case !slices.Contains(s.pending, seq):
			return fmt.Errorf("seq %d emitted before it was added", seq)
		}
		s.emitted[seq] = true
		start := e.ev.Start
		if start.IsZero() {
			start = e.at
		}
		if i == 0 || start.Before(want.Start) {
			want.Start = start
		}
		if i == 0 || e.at.Before(want.FirstAdded) {
			want.FirstAdded = e.at
		}
		want.Full = want.Full || e.ev.Full
		reason := e.ev.Reason
		if reason == "" {
			reason = UnknownReason
		}
		want.Reasons[reason]++
		for _, k := range e.ev.ConfigKeys {
			keys[k] = true
		}
		if e.bypass {
			if bypassFirst.IsZero() || e.at.Before(bypassFirst) {
				bypassFirst = e.at
			}
		} else {
			debounced = append(debounced, e)
		}
	}
	if req.Full != want.Full || !req.Start.Equal(want.Start) || !req.FirstAdded.Equal(want.FirstAdded) {
		return fmt.Errorf("full/start/added %v/%v/%v, want %v/%v/%v", req.Full, req.Start, req.FirstAdded, want.Full, want.Start, want.FirstAdded)
	}
	if len(req.ConfigKeys) != len(keys) {
		return fmt.Errorf("%d keys, want %d", len(req.ConfigKeys), len(keys))
	}
	for _, k := range req.ConfigKeys {
		if !keys[k] {
			return fmt.Errorf("key %v in no merged event", k)
		}
	}
	for r, c := range want.Reasons {
		if req.Reasons[r] != c {
			return fmt.Errorf("reasons %v, want %v", req.Reasons, want.Reasons)
		}
	}

	// Timing. The debounced part must be due; the request must not be
	// later than its due time or the Done that freed the debouncer.
	var due time.Time
	if len(debounced) > 0 {
		first, last := debounced[0].at, debounced[0].at
		for _, e := range debounced {
			first = minTime(first, e.at)
			last = maxTime(last, e.at)
		}
		if now.Sub(last) < s.cfg.DebounceAfter && now.Sub(first) < s.cfg.DebounceMax {
			return fmt.Errorf("debounced events %v emitted early: %v after the last, %v after the first", seqsOf(debounced), now.Sub(last), now.Sub(first))
		}
		due = minTime(last.Add(s.cfg.DebounceAfter), first.Add(s.cfg.DebounceMax))
		// No debounced event may be left behind: the batch goes out whole.
		for _, seq := range s.pending {
			if e := s.events[seq]; !e.bypass && !slices.Contains(req.Seqs, seq) {
				return fmt.Errorf("debounced seq %d left behind", seq)
			}
		}
	}
	// Bypass events are due at once: any emit takes all of them.
	for _, seq := range s.pending {
		if e := s.events[seq]; e.bypass && !slices.Contains(req.Seqs, seq) {
			return fmt.Errorf("bypass seq %d left behind", seq)
		}
	}
	if !bypassFirst.IsZero() && (due.IsZero() || bypassFirst.Before(due)) {
		due = bypassFirst
	}
	if latest := maxTime(due, s.freedAt); now.After(latest) {
		return fmt.Errorf("emitted late: due %v, freed %v, emitted %v", due.Sub(epoch), s.freedAt.Sub(epoch), now.Sub(epoch))
	}
	if now.After(s.freedAt) && now.Sub(req.FirstAdded) > s.cfg.DebounceMax {
		return fmt.Errorf("held %v > DebounceMax %v with nothing in flight", now.Sub(req.FirstAdded), s.cfg.DebounceMax)
	}
	if s.cfg.EnableEDSDebounce && !slices.Equal(sortedCopy(s.pending), req.Seqs) {
		return fmt.Errorf("emitted %v, want every pending event %v", req.Seqs, sortedCopy(s.pending))
	}
	s.pending = slices.DeleteFunc(s.pending, func(seq uint64) bool { return slices.Contains(req.Seqs, seq) })
	s.inFlight = true
	s.doneAt = now.Add(s.latencies())
	return nil
}

func (s *simShell) checkState() error {
	if got := s.d.Pending(); got != len(s.pending) {
		return fmt.Errorf("Pending() = %d, want %d", got, len(s.pending))
	}
	if got := s.d.inFlight; got != s.inFlight {
		return fmt.Errorf("InFlight() = %v, want %v", got, s.inFlight)
	}
	oldest, ok := oldestPendingSeq(s.d)
	if ok != (len(s.pending) > 0) || (ok && oldest != slices.Min(s.pending)) {
		return fmt.Errorf("oldestPendingSeq() = %d, %v with pending %v", oldest, ok, s.pending)
	}
	if _, ok := s.d.NextDeadline(); ok && s.inFlight {
		return fmt.Errorf("deadline armed while in flight")
	}
	return nil
}

func seqsOf(evs []simEvent) []uint64 {
	var out []uint64
	for _, e := range evs {
		out = append(out, e.ev.Seq)
	}
	return out
}

func sortedCopy(s []uint64) []uint64 { return slices.Sorted(slices.Values(s)) }

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// oldestPendingSeq is the lowest sequence added and not yet emitted: every
// added event with a lower sequence is in an emitted request. It reports
// false when nothing is pending.
func oldestPendingSeq(d *Debouncer) (uint64, bool) {
	switch {
	case d.debounced.n > 0 && d.bypass.n > 0:
		return min(d.debounced.firstSeq, d.bypass.firstSeq), true
	case d.debounced.n > 0:
		return d.debounced.firstSeq, true
	case d.bypass.n > 0:
		return d.bypass.firstSeq, true
	default:
		return 0, false
	}
}
