package snapshot

import (
	"fmt"
	"slices"
	"time"

	"google.golang.org/protobuf/proto"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// Record is one change record as the stream stored it.
type Record struct {
	Subject string
	Seq     uint64
	// Time is when the stream stored it.
	Time time.Time
	// Content is its Pilotwire-Content-Version header, if any.
	Content string
	// Data is the encoded pb.ChangeRecord.
	Data []byte
	// Model is the record's compact form (model.CompactForm), or nil:
	// what a frontend starting from the snapshot decodes instead of Data.
	// Only snapshots hold it; the stream holds records alone.
	Model []byte
}

// Set is the compacted state of the change stream: every live subject's
// last record, the subjects whose last record is a delete, and which live
// subjects may still have older records on the stream. It is fed records
// in stream order; it does no I/O.
type Set struct {
	seq  uint64    // last record applied
	at   time.Time // when it was stored
	live map[string]*Record
	// deleted: subject → its delete record (kept without data).
	deleted map[string]*Record
	// stale: live subjects that may have records before their last one,
	// with the bound below which they were purged already (0: never).
	stale map[string]uint64
	// bad counts records that could not be decoded (kept as live: the
	// model decides, as it does when it replays them).
	bad int
}

// NewSet returns an empty set at sequence 0.
func NewSet() *Set {
	return &Set{live: make(map[string]*Record), deleted: make(map[string]*Record), stale: make(map[string]uint64)}
}

// Seq is the last sequence applied; Time when that record was stored.
func (s *Set) Seq() uint64 { return s.seq }

// Time is when the last applied record was stored.
func (s *Set) Time() time.Time { return s.at }

// Len is the number of live subjects.
func (s *Set) Len() int { return len(s.live) }

// Deleted is the number of subjects whose last record is a delete.
func (s *Set) Deleted() int { return len(s.deleted) }

// Undecodable counts records whose op could not be read.
func (s *Set) Undecodable() int { return s.bad }

// Add applies one record. Sequences must grow; an older or repeated one is
// an error and changes nothing. A record whose op cannot be decoded counts
// as live (the model decides what it means).
func (s *Set) Add(r Record) error {
	if r.Seq <= s.seq {
		return fmt.Errorf("snapshot set: seq %d is not above %d", r.Seq, s.seq)
	}
	s.seq, s.at = r.Seq, r.Time
	var rec pb.ChangeRecord
	if err := proto.Unmarshal(r.Data, &rec); err != nil {
		s.bad++
	}
	_, wasLive := s.live[r.Subject]
	_, wasDeleted := s.deleted[r.Subject]
	if rec.GetOp() == pb.Op_OP_DELETE {
		delete(s.live, r.Subject)
		delete(s.stale, r.Subject)
		s.deleted[r.Subject] = &Record{Subject: r.Subject, Seq: r.Seq, Time: r.Time}
		return nil
	}
	rc := r
	s.live[r.Subject] = &rc
	delete(s.deleted, r.Subject)
	if wasLive || wasDeleted {
		if _, ok := s.stale[r.Subject]; !ok {
			s.stale[r.Subject] = 0 // an existing entry keeps its purged bound
		}
	}
	return nil
}

// load adds an entry of a snapshot; the set then stands at the
// snapshot's sequence (setAt).
func (s *Set) load(r Record, flags byte) {
	rc := r
	if flags&flagDeleted != 0 {
		rc.Data = nil
		s.deleted[r.Subject] = &rc
		return
	}
	s.live[r.Subject] = &rc
	if flags&flagStale != 0 {
		s.stale[r.Subject] = 0
	}
}

func (s *Set) setAt(seq uint64, at time.Time) { s.seq, s.at = seq, at }

// fillModels gives each live record that has none its compact form.
// Records keep it, so a record costs this once, not once per snapshot.
func (s *Set) fillModels(form func(data []byte) []byte) {
	if form == nil {
		return
	}
	for _, r := range s.live {
		if r.Model == nil && r.Data != nil {
			r.Model = form(r.Data)
			if r.Model == nil {
				r.Model = []byte{} // none: not computed again
			}
		}
	}
}

// entries is everything a snapshot keeps, in sequence order.
func (s *Set) entries() []entry {
	out := make([]entry, 0, len(s.live)+len(s.deleted))
	for subj, r := range s.live {
		var f byte
		if _, ok := s.stale[subj]; ok {
			f = flagStale
		}
		out = append(out, entry{rec: r, flags: f})
	}
	for _, r := range s.deleted {
		out = append(out, entry{rec: r, flags: flagDeleted})
	}
	slices.SortFunc(out, func(a, b entry) int { return compareSeq(a.rec.Seq, b.rec.Seq) })
	return out
}

// kinds counts the live records per kind, as kind names a subject's
// (subjects it does not name are left out).
func (s *Set) kinds(kind func(subject string) (string, bool)) map[string]int {
	out := make(map[string]int)
	for subj := range s.live {
		if k, ok := kind(subj); ok {
			out[k]++
		}
	}
	return out
}

// Live returns the live records in sequence order. The records are
// shared: callers must not change them.
func (s *Set) Live() []*Record {
	out := make([]*Record, 0, len(s.live))
	for _, r := range s.live {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *Record) int { return compareSeq(a.Seq, b.Seq) })
	return out
}

func compareSeq(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Purge is one subject's purge: every record of Subject below Below.
type Purge struct {
	Subject string
	Below   uint64
	// Deleted: the subject's last record is a delete (the whole subject
	// goes); otherwise its last record stays.
	Deleted bool
}

// PlanPurges returns, for a snapshot at horizon that the retention window
// no longer needs anything before, at most limit purges (0: no limit),
// deleted subjects first: a subject deleted at or below horizon goes
// entirely; a live subject loses its records below min(horizon+1, its
// last). The purge bound is a sequence, so a record written after the
// plan (an object re-created) survives. Done marks them applied.
func (s *Set) PlanPurges(horizon uint64, limit int) []Purge {
	var out []Purge
	full := func() bool { return limit > 0 && len(out) >= limit }
	subjects := make([]string, 0, len(s.deleted))
	for subj, r := range s.deleted {
		if r.Seq <= horizon {
			subjects = append(subjects, subj)
		}
	}
	slices.Sort(subjects)
	for _, subj := range subjects {
		if full() {
			return out
		}
		out = append(out, Purge{Subject: subj, Below: s.deleted[subj].Seq + 1, Deleted: true})
	}
	subjects = subjects[:0]
	for subj, done := range s.stale {
		if min(horizon+1, s.live[subj].Seq) > done {
			subjects = append(subjects, subj)
		}
	}
	slices.Sort(subjects)
	for _, subj := range subjects {
		if full() {
			return out
		}
		out = append(out, Purge{Subject: subj, Below: min(horizon+1, s.live[subj].Seq)})
	}
	return out
}

// Done records that p was applied.
func (s *Set) Done(p Purge) {
	if p.Deleted {
		if r := s.deleted[p.Subject]; r != nil && r.Seq < p.Below {
			delete(s.deleted, p.Subject)
		}
		return
	}
	r := s.live[p.Subject]
	switch {
	case r == nil:
	case p.Below >= r.Seq:
		delete(s.stale, p.Subject) // only its last record is left
	default:
		s.stale[p.Subject] = p.Below // records from Below on stay, until the horizon passes them
	}
}
