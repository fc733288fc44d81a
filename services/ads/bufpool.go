package ads

import (
	"fmt"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// responseBufferExponents are the buffer sizes (powers of two) of the
// pool the gRPC server marshals responses into and reads requests with.
// grpc-go's default pool jumps from 32 KiB to 1 MiB, and a buffer taken
// from a tier is cleared whole: every response between 32 KiB and 1 MiB
// (an initial sync's clusters, load assignments, listeners and routes)
// cleared 1 MiB, and allocated it while the pool was cold. Here every
// power of two up to 4 MiB (the largest request taken) has its tier, so a
// response clears at most twice its size.
var responseBufferExponents = []uint8{8, 10, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22}

// newResponseBufferPool is the gRPC server's buffer pool.
func newResponseBufferPool() mem.BufferPool {
	p, err := mem.NewBinaryTieredBufferPool(responseBufferExponents...)
	if err != nil {
		panic(fmt.Sprintf("response buffer pool: %v", err)) // the exponents are constants
	}
	return p
}

// poolCodec is the ADS server's protobuf codec. grpc-go's own codec
// marshals into the process-wide default pool whatever pool the server
// is given, so the server forces this one, which marshals into pool.
// A DiscoveryRequest's resource names come from names (internames.go)
// when it is set.
type poolCodec struct {
	pool  mem.BufferPool
	names *nameTable
}

func (poolCodec) Name() string { return "proto" }

func (c poolCodec) Marshal(v any) (mem.BufferSlice, error) {
	if sr, ok := v.(*sotwResponse); ok {
		return sr.marshal(c.pool), nil
	}
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("marshal: %T is not a protobuf message", v)
	}
	// Size fills the message's size cache, which the marshal reuses.
	size := proto.Size(m)
	opts := proto.MarshalOptions{UseCachedSize: true}
	if mem.IsBelowBufferPoolingThreshold(size) {
		b, err := opts.Marshal(m)
		if err != nil {
			return nil, err
		}
		return mem.BufferSlice{mem.SliceBuffer(b)}, nil
	}
	buf := c.pool.Get(size)
	b, err := opts.MarshalAppend((*buf)[:0], m)
	if err != nil {
		c.pool.Put(buf)
		return nil, err
	}
	*buf = b
	return mem.BufferSlice{mem.NewBuffer(buf, c.pool)}, nil
}

func (c poolCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("unmarshal: %T is not a protobuf message", v)
	}
	buf := data.MaterializeToBuffer(c.pool)
	defer buf.Free()
	if req, ok := m.(*discovery.DiscoveryRequest); ok && c.names != nil {
		return c.names.unmarshalRequest(buf.ReadOnlyData(), req)
	}
	return proto.Unmarshal(buf.ReadOnlyData(), m)
}
