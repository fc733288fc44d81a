package debouncer

import (
	"google.golang.org/protobuf/proto"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// requestBound is the largest PushRequest the debouncer publishes: the
// configured bound, but at most half the largest message the server
// (maxPayload) and the PUSHES stream (streamMax, 0 or less when unset)
// accept, so headers and the fields set at publish time always fit.
//
// It is never below minRequestBytes: what a request cannot drop (its
// covered ranges, bounded by debounce.Config.MaxBypassRanges, and the
// fixed fields) always fits.
func requestBound(configured int, maxPayload int64, streamMax int32) int {
	return max(minRequestBytes, bound(configured, maxPayload, streamMax))
}

// minRequestBytes is the least requestBound gives: room for the covered
// ranges of the most fragmented request pkg/debounce emits.
const minRequestBytes = 16 << 10

func bound(configured int, maxPayload int64, streamMax int32) int {
	limit := maxPayload
	if streamMax > 0 && (limit <= 0 || int64(streamMax) < limit) {
		limit = int64(streamMax)
	}
	if limit > 0 && limit/2 < int64(configured) {
		return int(limit / 2)
	}
	return configured
}

// How fit made a request small enough.
const (
	fitNone   = ""       // it was small enough
	fitKeys   = "keys"   // its keys were dropped: a full push
	fitJoined = "joined" // also its covered ranges were joined over sequences earlier requests carried
	fitOver   = "over"   // still too large: pending sequences lie between its ranges
)

// fit makes pr at most maxBytes long. Past the bound the request drops
// its config keys and becomes a full push (a full push needs no keys). If
// its covered ranges alone are still too long (sequences interleaved with
// those of other requests), they are joined over the gaps whose sequences
// earlier requests carried (carried reports that). Ranges are never
// joined over a sequence still pending: that sequence will be listed by
// the request that carries it, and listing it here too would publish it
// twice. A request still too long then is left as it is (fitOver); it
// cannot happen with pkg/debounce's bound on bypass fragmentation and
// requestBound's minimum.
func fit(pr *pb.PushRequest, maxBytes int, carried func(seq uint64) bool) string {
	if proto.Size(pr) <= maxBytes {
		return fitNone
	}
	pr.ConfigKeys = nil
	pr.Full = true
	if proto.Size(pr) <= maxBytes {
		return fitKeys
	}
	pr.Covered = joinCovered(pr.GetCovered(), carried)
	if proto.Size(pr) <= maxBytes {
		return fitJoined
	}
	return fitOver
}

// joinCovered joins consecutive ranges whose gap holds only sequences
// carried by earlier requests.
func joinCovered(rs []*pb.SeqRange, carried func(seq uint64) bool) []*pb.SeqRange {
	var out []*pb.SeqRange
	for _, r := range rs {
		n := len(out)
		if n > 0 && gapCarried(out[n-1].GetLast()+1, r.GetFirst(), carried) {
			out[n-1].Last = max(out[n-1].GetLast(), r.GetLast())
			continue
		}
		out = append(out, &pb.SeqRange{First: r.GetFirst(), Last: r.GetLast()})
	}
	return out
}

// gapCarried reports whether every sequence in [from, to) was carried.
func gapCarried(from, to uint64, carried func(uint64) bool) bool {
	for s := from; s < to; s++ {
		if !carried(s) {
			return false
		}
	}
	return true
}
