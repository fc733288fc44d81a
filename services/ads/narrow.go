package ads

import "sync/atomic"

// A push of EDS or RDS to a state-of-the-world stream carries only the
// resources whose version differs from what the connection was last sent
// (response.onlyChanged against the watch's sentRes). When a connection
// was last sent exactly a shared response's resources, as every connection
// of an alike fleet is after a push, that narrowing depends on the two
// shared responses alone: narrowFrom works it out once for the fleet and
// keeps it on the newer response, instead of looking every name up in
// every connection's map.

// responseIDs names shared responses (selectResponse) for narrowings,
// which must not hold the older response itself: a narrowing kept on each
// response would otherwise hold every response before it.
var responseIDs atomic.Uint64

// narrowing is a response narrowed to what changed since the response
// with id from.
type narrowing struct {
	from    uint64
	out     *response
	any     bool
	covered bool // every name of the older response is in the newer
}

// maxNarrowings bounds the narrowings a response keeps: one per older
// response its connections were last sent (the fleet's, and a few for
// connections that fell behind).
const maxNarrowings = 4

// narrowFrom is r.onlyChanged(sent) for a connection whose sent map holds
// exactly prev's names and versions, and whether all of prev's names are
// in r (the connection then holds exactly r once sent the narrowing). It
// is computed once per pair and shared; the result is read-only like r.
func (r *response) narrowFrom(prev *response) (out *response, any, covered bool) {
	kept := r.narrowed.Load()
	if kept != nil {
		for _, n := range *kept {
			if n.from == prev.id {
				return n.out, n.any, n.covered
			}
		}
	}
	sent := prev.versionsByName()
	out, any = r.onlyChanged(sent)
	out.shared = true
	in := 0
	for _, n := range r.names {
		if _, ok := sent[n]; ok {
			in++
		}
	}
	covered = in == len(sent)
	// Keep it, newest first. A lost race keeps the other connection's
	// narrowing instead: both are the same.
	next := []narrowing{{from: prev.id, out: out, any: any, covered: covered}}
	if kept != nil {
		next = append(next, (*kept)[:min(len(*kept), maxNarrowings-1)]...)
	}
	r.narrowed.CompareAndSwap(kept, &next)
	return out, any, covered
}
