package ads

import (
	"crypto/sha256"
	"slices"
	"time"

	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// pushOrder is the order in which types are sent on a push, as Envoy wants
// (clusters before their endpoints, listeners before their routes).
var pushOrder = []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType}

// shortType names a type URL in metrics and logs.
func shortType(typeURL string) string {
	switch typeURL {
	case resource.ClusterType:
		return "cds"
	case resource.EndpointType:
		return "eds"
	case resource.ListenerType:
		return "lds"
	case resource.RouteType:
		return "rds"
	case resource.SecretType:
		return "sds"
	}
	return "other"
}

// wildcardDefault reports whether an initial request with no names means
// "everything" for the type (CDS and LDS), per the xDS protocol.
func wildcardDefault(typeURL string) bool {
	return typeURL == resource.ClusterType || typeURL == resource.ListenerType
}

// supportedType reports whether this frontend generates the type.
func supportedType(typeURL string) bool {
	return slices.Contains(pushOrder, typeURL)
}

// watch is one connection's subscription to one type; owned by the loop.
type watch struct {
	typeURL  string
	wildcard bool
	named    bool     // the stream has named resources of the type
	names    []string // sorted, deduplicated; ignored when wildcard; replaced, never changed in place (published ConnectionInfos share it)
	nameKey  string   // identifies names among watches; "" until computed
	// last response
	nonce       string
	sentVersion string // version of the last response sent
	// genVersion is the version of the state last generated and handled:
	// sent, or found to need no response (removals only); pushes compare
	// against it
	genVersion string
	genSeq     uint64 // model sequence of the last generation, sent or not
	// state of the world EDS/RDS: version of each resource last sent, to
	// push only what changed (sentMap); nil while sentAs says it
	sentRes map[string]string
	// sentAs: the shared response whose names and versions the connection
	// holds exactly, or nil (entries were dropped, or removed resources
	// are kept); a push then narrows by the two responses (narrow.go).
	// Alike connections in sync thus keep no map of their own: sentRes is
	// made from sentAs only when one is needed, and then equals it.
	sentAs *response
	// state of the world CDS: the last response sent (always the whole
	// set, shared with the connections sent the same), to tell which
	// clusters the next one changes; a map per connection would hold a
	// copy of the same names and versions
	sentCDS *response
	// forgotten: entries of sentRes were dropped (the client must be sent
	// them again although the version did not change)
	forgotten bool
	// alwaysRespond: answer the next request of the type even when it looks
	// like an ACK (EDS after the clusters it warms changed)
	alwaysRespond bool
	// delta only: what the client has (name -> version; absent = told it
	// does not exist) and its explicit subscriptions
	known      map[string]string
	subscribed map[string]bool
	// flow control: a response is out and not yet ACKed or NACKed; pushes
	// meanwhile only mark the watch deferred, and the answer sends the
	// latest state once (so a slow client gets at most two responses).
	awaiting bool
	deferred bool
	// client's answers
	ackedVersion string
	nackError    string
	nackedNonce  string // nonce of the last NACK, to tell a repeat
	sentAt       time.Time
	ackedAt      time.Time
	// shown: the watch's registry view last made (conninfo.go), shared by
	// the infos published since, read-only
	shown *pb.Watch
}

// setNames applies the names of a request and reports whether the
// subscription changed. A request with no names is a wildcard for CDS and
// LDS (legacy wildcard) until the stream names resources of the type; once
// it has, no names means none, as when a gRPC client unsubscribes from its
// last listener. A wildcard stays one on later empty requests.
func (w *watch) setNames(names []string) bool {
	if w.sameNames(names) {
		return false
	}
	return w.setNamesByCopy(names)
}

// setNamesByCopy is setNames without the no-change shortcut: the names
// copied, sorted and compared.
func (w *watch) setNamesByCopy(names []string) bool {
	wildcard := false
	var explicit []string
	for _, n := range names {
		if n == "*" {
			wildcard = true
			continue
		}
		explicit = append(explicit, n)
	}
	if len(names) == 0 && wildcardDefault(w.typeURL) && (!w.named || w.wildcard) {
		wildcard = true
	}
	if len(explicit) > 0 {
		w.named = true
	}
	slices.Sort(explicit)
	explicit = slices.Compact(explicit)
	changed := wildcard != w.wildcard || !slices.Equal(explicit, w.names)
	w.wildcard = wildcard
	if changed {
		w.names = explicit
		w.nameKey = ""
	}
	return changed
}

// forgetSent drops name from what the connection was sent (sentRes), and
// with it the shared response sentRes held exactly (sentAs). It reports
// whether name was there. Everything but a send that removes from sentRes
// goes through here, so sentAs is never stale.
func (w *watch) forgetSent(name string) bool {
	sent := w.sentMap()
	if _, had := sent[name]; !had {
		return false
	}
	delete(sent, name)
	w.sentAs = nil
	return true
}

// hasSent reports whether the connection holds resources of the type
// that were sent to it (EDS and RDS in state of the world).
func (w *watch) hasSent() bool { return w.sentRes != nil || w.sentAs != nil }

// sentMap returns sentRes, made from sentAs first when only that is
// kept.
func (w *watch) sentMap() map[string]string {
	if w.sentRes == nil && w.sentAs != nil {
		w.sentRes = w.sentAs.versionsByName()
	}
	return w.sentRes
}

// narrow narrows full to what differs from what the connection was sent
// (hasSent): once per pair of shared responses when it holds sentAs. It
// reports whether anything is left, and covered as narrowFrom does.
func (w *watch) narrow(full *response) (r *response, any, covered bool) {
	if w.sentAs != nil {
		return full.narrowFrom(w.sentAs)
	}
	r, any = full.onlyChanged(w.sentRes)
	return r, any, false
}

// sentWhole notes that the connection was sent the whole of full.
func (w *watch) sentWhole(full *response) {
	if full.id != 0 {
		w.sentAs, w.sentRes = full, nil
		return
	}
	w.sentAs, w.sentRes = nil, full.versionsByName()
}

// sentNarrowed notes that the connection was sent r, full narrowed to
// what changed since what it held; covered: it held sentAs, all of whose
// names full has, so it now holds exactly full.
func (w *watch) sentNarrowed(full, r *response, covered bool) {
	if covered && full.id != 0 {
		w.sentAs, w.sentRes = full, nil
		return
	}
	sent := w.sentMap()
	for i, n := range r.names {
		sent[n] = r.versions[i]
	}
	// sent now holds every resource of full at full's version (what the
	// narrowing left out was there already): exactly full's when it holds
	// nothing more.
	w.sentAs = nil
	if full.id != 0 && len(sent) == len(full.names) {
		w.sentAs, w.sentRes = full, nil // the map is no longer needed
	}
}

// sameNamesMax bounds the names sameNames checks without allocating.
const sameNamesMax = 4096

// sameNames reports whether a request naming names leaves a named
// (not wildcard) watch as it is: the same names, in any order, each once.
// Every ACK repeats the names it watches, so this is the common case,
// and it allocates nothing (setNames otherwise copies and sorts them).
// false means only that setNames must work it out.
func (w *watch) sameNames(names []string) bool {
	if w.wildcard || len(names) == 0 || len(names) != len(w.names) {
		return false
	}
	if slices.Equal(names, w.names) {
		return true // sent back in the order they are kept
	}
	if len(names) > sameNamesMax {
		return false
	}
	var seen [sameNamesMax / 64]uint64
	for _, n := range names {
		i, ok := slices.BinarySearch(w.names, n)
		if !ok || seen[i/64]&(1<<(i%64)) != 0 {
			return false // new, or named twice (then another is missing)
		}
		seen[i/64] |= 1 << (i % 64)
	}
	return true
}

// namesKey identifies the watch's names: equal names, equal keys. It is
// computed once per subscription change.
func (w *watch) namesKey() string {
	if w.nameKey == "" && len(w.names) > 0 {
		w.nameKey = namesDigest(w.names)
	}
	return w.nameKey
}

// namesDigest is the SHA-256 of names, each followed by a zero byte,
// hashed in chunks of a stack buffer: a name converted for the hash one by
// one would be an allocation each.
func namesDigest(names []string) string {
	h := sha256.New()
	var buf [4096]byte
	b := buf[:0]
	for _, n := range names {
		if len(b)+len(n)+1 > len(buf) {
			h.Write(b)
			b = buf[:0]
			if len(n)+1 > len(buf) {
				h.Write([]byte(n))
				h.Write([]byte{0})
				continue
			}
		}
		b = append(b, n...)
		b = append(b, 0)
	}
	h.Write(b)
	var sum [sha256.Size]byte
	return string(h.Sum(sum[:0]))
}
