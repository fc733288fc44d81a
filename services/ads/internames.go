package ads

import (
	"hash/maphash"
	"sync"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/intern"
)

// Every ACK of a state-of-the-world stream repeats the names it watches:
// an Envoy sidecar's EDS ACK names every cluster it knows. Decoding those
// names was most of decoding a request (a string allocated and checked
// for UTF-8 per name per ACK, for every proxy of a push), while the names
// themselves are the same few thousand across the fleet. The server's
// codec therefore takes the names of a DiscoveryRequest from a table of
// the names it has seen, checked once.
//
// A fleet's ACKs are more alike than that: every sidecar of a push sends
// the same run of names, byte for byte. Looking each name up took a read
// lock and a hash per name, contended by every core's streams. The table
// therefore also keeps whole runs: a request whose names lie in one run of
// fields, as every encoder writes them, is hashed once, compared once
// with a run it holds, and given that run's names: one slice shared,
// read-only, by every request that carried the same bytes.

// discoveryRequestNamesField is DiscoveryRequest.resource_names, read from
// the generated descriptor rather than written out again.
var discoveryRequestNamesField = (&discovery.DiscoveryRequest{}).ProtoReflect().Descriptor().
	Fields().ByName("resource_names").Number()

// nameTable holds resource names already seen, each checked for UTF-8
// (intern.Table.Bytes), and runs of them (nameRuns).
type nameTable struct {
	intern.Table
	runs nameRuns
}

func newNameTable() *nameTable { return &nameTable{runs: nameRuns{seed: maphash.MakeSeed()}} }

// Bounds of the runs kept: a run of fewer names is cheaper to look up
// name by name; the runs start over when they would hold more than
// maxRunNames names or maxRunBytes bytes of runs in all, so ever new runs
// (a client inventing names) cost what they would without them, and they
// hold at most about maxRunBytes of names (names longer than the name
// table keeps are held by their run) and 16 bytes a name beside them.
const (
	minRunNames = 8
	maxRunNames = 1 << 20
	maxRunBytes = 64 << 20
)

// nameRuns holds the names of runs of resource_names fields, by a hash of
// the run's bytes. It is safe for concurrent use.
type nameRuns struct {
	seed maphash.Seed // set at construction

	mu    sync.RWMutex
	runs  map[uint64]heldRun // guarded by mu
	names int                // guarded by mu; names in runs
	bytes int                // guarded by mu; bytes of the runs
}

// heldRun is a run's names (read-only, cap == len) and the run's size.
type heldRun struct {
	names []string
	bytes int
}

// get returns the names of the run whose bytes are run, if it holds it.
func (r *nameRuns) get(h uint64, run []byte) ([]string, bool) {
	r.mu.RLock()
	held, ok := r.runs[h]
	r.mu.RUnlock()
	if !ok || !runHolds(run, held.names) {
		return nil, false
	}
	return held.names, true
}

// put keeps names, the names of a run of size bytes, under hash h.
func (r *nameRuns) put(h uint64, names []string, size int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.runs[h]; ok {
		r.names, r.bytes = r.names-len(old.names), r.bytes-old.bytes
		delete(r.runs, h)
	}
	if r.runs == nil || r.names+len(names) > maxRunNames || r.bytes+size > maxRunBytes {
		r.runs, r.names, r.bytes = make(map[uint64]heldRun), 0, 0
	}
	r.runs[h] = heldRun{names: names, bytes: size}
	r.names, r.bytes = r.names+len(names), r.bytes+size
}

// runHolds reports whether run, a run of resource_names fields, names
// exactly names in order: the check that a hash match is the run itself.
func runHolds(run []byte, names []string) bool {
	i := 0
	for rest := run; len(rest) > 0; i++ {
		_, _, n := protowire.ConsumeTag(rest)
		v, m := protowire.ConsumeBytes(rest[n:])
		if i == len(names) || string(v) != names[i] {
			return false
		}
		rest = rest[n+m:]
	}
	return i == len(names)
}

// unmarshalRequest decodes b into req as proto.Unmarshal does, with the
// resource names from the table. Anything it does not take as plainly
// well formed (a malformed field, a name that is not UTF-8) is left to
// proto.Unmarshal on the whole message, so errors are protobuf's own.
// req.ResourceNames may be shared with other requests: read-only.
func (t *nameTable) unmarshalRequest(b []byte, req *discovery.DiscoveryRequest) error {
	// First pass: count the names and the bytes of everything else, and
	// find whether the names lie in one run [runStart, runEnd).
	names, restLen := 0, 0
	runStart, runEnd, oneRun := -1, -1, true
	for off := 0; off < len(b); {
		rest := b[off:]
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return proto.Unmarshal(b, req)
		}
		m := protowire.ConsumeFieldValue(num, typ, rest[n:])
		if m < 0 {
			return proto.Unmarshal(b, req)
		}
		if num == discoveryRequestNamesField && typ == protowire.BytesType {
			names++
			if runStart < 0 {
				runStart = off
			} else if off != runEnd {
				oneRun = false
			}
			runEnd = off + n + m
		} else {
			restLen += n + m
		}
		off += n + m
	}
	if names == 0 {
		return proto.Unmarshal(b, req)
	}
	if oneRun && names >= minRunNames {
		return t.unmarshalRun(b, runStart, runEnd, names, req)
	}
	// Second pass: the names from the table, everything else to protobuf.
	out := make([]string, 0, names)
	other := make([]byte, 0, restLen)
	for rest := b; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		m := protowire.ConsumeFieldValue(num, typ, rest[n:])
		if num == discoveryRequestNamesField && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(rest[n:])
			s, ok := t.Bytes(v)
			if !ok {
				return proto.Unmarshal(b, req)
			}
			out = append(out, s)
		} else {
			other = append(other, rest[:n+m]...)
		}
		rest = rest[n+m:]
	}
	if err := proto.Unmarshal(other, req); err != nil {
		return err
	}
	req.ResourceNames = out
	return nil
}

// unmarshalRun decodes a request whose count names lie in b[start:end]:
// the names are those of the same run seen before, or taken from the
// table and kept as a run; the fields before and after the run go to
// protobuf, merged as it merges a message's fields.
func (t *nameTable) unmarshalRun(b []byte, start, end, count int, req *discovery.DiscoveryRequest) error {
	run := b[start:end]
	h := maphash.Bytes(t.runs.seed, run)
	out, ok := t.runs.get(h, run)
	if !ok {
		out = make([]string, 0, count)
		for rest := run; len(rest) > 0; {
			_, _, n := protowire.ConsumeTag(rest)
			v, m := protowire.ConsumeBytes(rest[n:])
			s, ok := t.Bytes(v)
			if !ok {
				return proto.Unmarshal(b, req)
			}
			out = append(out, s)
			rest = rest[n+m:]
		}
		t.runs.put(h, out, len(run))
	}
	proto.Reset(req)
	merge := proto.UnmarshalOptions{Merge: true}
	if err := merge.Unmarshal(b[:start], req); err != nil {
		return err
	}
	if err := merge.Unmarshal(b[end:], req); err != nil {
		return err
	}
	req.ResourceNames = out
	return nil
}
