package pusher

import (
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// batcher collects one frontend's orders into PushOrderBatches no larger
// than maxBytes encoded (the server's max payload unless configured lower;
// issue 12 row 2). An order too large on its own drops its config keys and
// goes out as a full push: the frontend regenerates everything, which is
// always correct.
type batcher struct {
	// set at construction
	maxBytes int
	header   *pb.PushOrderBatch // the fields every batch carries, no orders
	baseSize int                // encoded size of header

	// owned by the dispatcher
	cur  *pb.PushOrderBatch
	size int
}

func newBatcher(header *pb.PushOrderBatch, maxBytes int) *batcher {
	return &batcher{maxBytes: maxBytes, header: header, baseSize: proto.Size(header)}
}

// orderSize is what an order adds to a batch's encoding (field 1, length
// delimited).
func orderSize(o *pb.PushOrder) int {
	return protowire.SizeTag(1) + protowire.SizeBytes(proto.Size(o))
}

// add adds o. It returns a batch that is full and must be sent first (nil
// if none), and whether o had to drop its keys.
func (b *batcher) add(o *pb.PushOrder) (ready *pb.PushOrderBatch, shrunk bool) {
	n := orderSize(o)
	if b.baseSize+n > b.maxBytes && len(o.ConfigKeys) > 0 {
		o.ConfigKeys, o.Full = nil, true
		n, shrunk = orderSize(o), true
	}
	if b.cur != nil && b.size+n > b.maxBytes {
		ready = b.take()
	}
	if b.cur == nil {
		b.cur = proto.CloneOf(b.header)
		b.size = b.baseSize
	}
	b.cur.Orders = append(b.cur.Orders, o)
	b.size += n
	return ready, shrunk
}

// take returns the batch being filled (nil if empty) and starts anew.
func (b *batcher) take() *pb.PushOrderBatch {
	out := b.cur
	b.cur, b.size = nil, 0
	return out
}
