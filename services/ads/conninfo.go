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
// response and ACK, so the watches and the timestamps come in one
// allocation each, not one per message.
func (c *conn) info() *pb.ConnectionInfo {
	n := len(c.watches)
	ws := make([]pb.Watch, n)
	ts := make([]timestamppb.Timestamp, 2*n) // sent and acked of each
	stamp := func(t time.Time) *timestamppb.Timestamp {
		if t.IsZero() {
			return nil
		}
		p := &ts[0]
		ts = ts[1:]
		p.Seconds, p.Nanos = t.Unix(), int32(t.Nanosecond())
		return p
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
		ConnectedAt: timestamppb.New(c.connected),
		Peer:        c.peer,
		Delta:       c.delta != nil,
		Scope:       c.scope,
		Watches:     make([]*pb.Watch, 0, n),
	}
	for _, t := range pushOrder {
		w, ok := c.watches[t]
		if !ok {
			continue
		}
		pw := &ws[len(ci.Watches)]
		pw.TypeUrl = t
		pw.Wildcard = w.wildcard
		pw.Names = w.names // the loop replaces it, never changes it in place
		pw.AckedVersion, pw.SentVersion = w.ackedVersion, w.sentVersion
		pw.NackError, pw.Nonce = w.nackError, w.nonce
		pw.SentAt, pw.AckedAt = stamp(w.sentAt), stamp(w.ackedAt)
		ci.Watches = append(ci.Watches, pw)
	}
	return ci
}
