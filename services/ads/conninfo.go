package ads

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// syncedSeq is the change-stream sequence every watched type reflects: the
// oldest model any of them was last generated from.
func (c *conn) syncedSeq() uint64 {
	var seq uint64
	first := true
	for _, w := range c.watches {
		if first || w.genSeq < seq {
			seq = w.genSeq
			first = false
		}
	}
	return seq
}

// info is the connection as the registry shows it. It runs after every
// response and ACK, and between two of them most watches are as they were:
// a watch's view is made again only when what it shows changed, and the
// views of the others are shared with the infos published before (each
// view is read-only once made).
func (c *conn) info() *pb.ConnectionInfo {
	if c.connectedAt == nil {
		c.connectedAt = timestamppb.New(c.connected)
	}
	ci := &pb.ConnectionInfo{
		ConnId:      c.id,
		Frontend:    c.s.id,
		NodeId:      c.proxy.ID,
		Namespace:   c.proxy.Namespace,
		ClusterId:   c.proxy.ClusterID,
		ProxyType:   c.proxy.Type,
		Generator:   c.proxy.Generator,
		SyncedSeq:   c.syncedSeq(),
		ConnectedAt: c.connectedAt,
		Peer:        c.peer,
		Delta:       c.delta != nil,
		Scope:       c.scope,
		Watches:     make([]*pb.Watch, 0, len(c.watches)),
	}
	for _, t := range pushOrder {
		if w, ok := c.watches[t]; ok {
			ci.Watches = append(ci.Watches, w.view())
		}
	}
	return ci
}

// view is the watch as the registry shows it: the one made last while
// nothing it shows has changed, else a new one.
func (w *watch) view() *pb.Watch {
	if v := w.shown; v != nil && v.Wildcard == w.wildcard && sameSlice(v.Names, w.names) &&
		v.AckedVersion == w.ackedVersion && v.SentVersion == w.sentVersion &&
		v.NackError == w.nackError && v.Nonce == w.nonce &&
		sameStamp(v.SentAt, w.sentAt) && sameStamp(v.AckedAt, w.ackedAt) {
		return v
	}
	stamp := func(t time.Time) *timestamppb.Timestamp {
		if t.IsZero() {
			return nil
		}
		return timestamppb.New(t)
	}
	w.shown = &pb.Watch{
		TypeUrl:      w.typeURL,
		Wildcard:     w.wildcard,
		Names:        w.names, // the loop replaces it, never changes it in place
		AckedVersion: w.ackedVersion,
		SentVersion:  w.sentVersion,
		NackError:    w.nackError,
		Nonce:        w.nonce,
		SentAt:       stamp(w.sentAt),
		AckedAt:      stamp(w.ackedAt),
	}
	return w.shown
}

// sameStamp reports whether ts, as view makes it, shows t (nil for the
// zero time).
func sameStamp(ts *timestamppb.Timestamp, t time.Time) bool {
	if t.IsZero() {
		return ts == nil
	}
	return ts != nil && ts.Seconds == t.Unix() && ts.Nanos == int32(t.Nanosecond())
}

// sameSlice reports whether a and b are the same slice: names are
// replaced, never changed in place, so the same backing array and length
// are the same names.
func sameSlice(a, b []string) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}
