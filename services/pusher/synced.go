package pusher

import (
	"slices"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// seqRange is an inclusive range of change-stream sequences.
type seqRange struct{ first, last uint64 }

// maxSkipped bounds the ranges a connection remembers above its synced
// sequence. Forgetting one is safe: the connection then looks behind and is
// pushed (or resynced) sooner than needed, never later.
const maxSkipped = 256

// syncState is what the pusher knows a connection's config reflects: every
// sequence up to synced, and the ranges above it that belong to requests
// scoped out for it (they changed nothing it watches). synced never passes
// a sequence whose request has not reached it (issue 12 row 1): with EDS
// debounce off a request may overtake an older one, so a single high-water
// mark would skip the older request.
type syncState struct {
	// synced: every sequence up to it is reflected. From the registry and
	// PushDone reports, which are high-water marks (a frontend generates
	// from its whole model), and from skipped ranges once they join it.
	synced uint64
	// skipped: ascending, disjoint ranges above synced+1 that do not
	// affect the connection.
	skipped []seqRange
}

// advance raises synced to at least seq and absorbs the skipped ranges it
// reaches.
func (s *syncState) advance(seq uint64) {
	s.synced = max(s.synced, seq)
	i := 0
	for ; i < len(s.skipped); i++ {
		r := s.skipped[i]
		if r.first > s.synced+1 {
			break
		}
		s.synced = max(s.synced, r.last)
	}
	s.skipped = s.skipped[i:]
	if len(s.skipped) == 0 {
		s.skipped = nil
	}
}

// skip records ranges that do not affect the connection.
func (s *syncState) skip(rs []seqRange) {
	for _, r := range rs {
		if r.last <= s.synced {
			continue
		}
		r.first = max(r.first, s.synced+1)
		s.skipped = insertRange(s.skipped, r)
	}
	if len(s.skipped) > maxSkipped {
		s.skipped = s.skipped[:maxSkipped]
	}
	s.advance(s.synced)
}

// insertRange adds r to ascending, disjoint ranges, merging neighbours.
func insertRange(rs []seqRange, r seqRange) []seqRange {
	i, _ := slices.BinarySearchFunc(rs, r.first, func(x seqRange, first uint64) int {
		switch {
		case x.first < first:
			return -1
		case x.first > first:
			return 1
		}
		return 0
	})
	rs = slices.Insert(rs, i, r)
	// Merge with the left neighbour, then swallow the right ones.
	if i > 0 && rs[i-1].last+1 >= rs[i].first {
		rs[i-1].last = max(rs[i-1].last, rs[i].last)
		rs = slices.Delete(rs, i, i+1)
		i--
	}
	for i+1 < len(rs) && rs[i].last+1 >= rs[i+1].first {
		rs[i].last = max(rs[i].last, rs[i+1].last)
		rs = slices.Delete(rs, i+1, i+2)
	}
	return rs
}

// coveredRanges is the sequences a PushRequest covers: its covered ranges,
// or, from a writer that does not list them, [first_seq, through_seq], or
// only through_seq when first_seq is unset too (the narrowest claim, so
// scoping never marks a connection synced over a sequence it did not see).
func coveredRanges(pr *pb.PushRequest) []seqRange {
	if cs := pr.GetCovered(); len(cs) > 0 {
		out := make([]seqRange, 0, len(cs))
		for _, c := range cs {
			if c.GetFirst() <= c.GetLast() {
				out = append(out, seqRange{c.GetFirst(), c.GetLast()})
			}
		}
		return out
	}
	if f := pr.GetFirstSeq(); f > 0 && f <= pr.GetThroughSeq() {
		return []seqRange{{f, pr.GetThroughSeq()}}
	}
	return []seqRange{{pr.GetThroughSeq(), pr.GetThroughSeq()}}
}
