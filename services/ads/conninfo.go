package ads

import (
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// timestamp is t as a proto timestamp, nil when unset.
func timestamp(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

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

// info is the connection as the registry shows it.
func (c *conn) info() *pb.ConnectionInfo {
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
	}
	for _, t := range pushOrder {
		w, ok := c.watches[t]
		if !ok {
			continue
		}
		ci.Watches = append(ci.Watches, &pb.Watch{
			TypeUrl:      t,
			Wildcard:     w.wildcard,
			Names:        w.names, // the loop replaces it, never changes it in place
			AckedVersion: w.ackedVersion,
			SentVersion:  w.sentVersion,
			NackError:    w.nackError,
			Nonce:        w.nonce,
			SentAt:       timestamp(w.sentAt),
			AckedAt:      timestamp(w.ackedAt),
		})
	}
	return ci
}
