package ads

import (
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// A state-of-the-world response is the same resources for every
// connection given one shared response: only its nonce differs. The
// frontend therefore encodes a shared response's resources once
// (response.wire) and sends each connection a sotwResponse: the codec
// writes the version, type and nonce around those bytes instead of sizing
// and marshalling the whole DiscoveryResponse again per connection (about
// 7% of the frontend's CPU in an initial sync of 5,000 sidecars). The bytes
// on the wire are exactly proto.Marshal's for the same DiscoveryResponse.

// DiscoveryResponse field numbers (envoy.service.discovery.v3).
const (
	drVersionInfo protowire.Number = 1
	drResources   protowire.Number = 2
	drTypeURL     protowire.Number = 4
	drNonce       protowire.Number = 5
)

// sotwResponse is one DiscoveryResponse to send: r's resources with this
// connection's version, type and nonce.
type sotwResponse struct {
	version, typeURL, nonce string
	r                       *response
}

// proto is the DiscoveryResponse the codec encodes sr as.
func (sr *sotwResponse) proto() *discovery.DiscoveryResponse {
	return &discovery.DiscoveryResponse{VersionInfo: sr.version, Resources: sr.r.resources, TypeUrl: sr.typeURL, Nonce: sr.nonce}
}

// encodedResources holds a shared response's resources field, encoded.
type encodedResources struct {
	b []byte
}

// wire returns r's resources encoded as the repeated resources field of a
// DiscoveryResponse. A shared response (one that many connections are
// sent) keeps the encoding; any other is encoded for the one send.
func (r *response) wire() []byte {
	if !r.shared {
		return appendResources(nil, r.resources)
	}
	if e := r.encoded.Load(); e != nil {
		return e.b
	}
	e := &encodedResources{b: appendResources(nil, r.resources)}
	// A lost race keeps the other connection's encoding: both are the same.
	if !r.encoded.CompareAndSwap(nil, e) {
		e = r.encoded.Load()
	}
	return e.b
}

// appendResources appends the resources field of a DiscoveryResponse
// holding rs to b, as proto.Marshal writes it.
func appendResources(b []byte, rs []*anypb.Any) []byte {
	n := 0
	for _, a := range rs {
		n += protowire.SizeTag(drResources) + protowire.SizeBytes(anySize(a))
	}
	if b == nil {
		b = make([]byte, 0, n)
	}
	for _, a := range rs {
		b = protowire.AppendTag(b, drResources, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(anySize(a)))
		b = appendAny(b, a)
	}
	return b
}

// anySize is the encoded size of a. An Any with unknown fields (none the
// generators make) is sized by protobuf itself.
func anySize(a *anypb.Any) int {
	if len(a.ProtoReflect().GetUnknown()) > 0 {
		return proto.Size(a)
	}
	n := 0
	if a.GetTypeUrl() != "" {
		n += protowire.SizeTag(1) + protowire.SizeBytes(len(a.GetTypeUrl()))
	}
	if len(a.GetValue()) > 0 {
		n += protowire.SizeTag(2) + protowire.SizeBytes(len(a.GetValue()))
	}
	return n
}

// appendAny appends a's encoding: its type URL then its value, as
// proto.Marshal writes them.
func appendAny(b []byte, a *anypb.Any) []byte {
	if len(a.ProtoReflect().GetUnknown()) > 0 {
		out, err := proto.MarshalOptions{}.MarshalAppend(b, a)
		if err != nil {
			// An Any's fields are a string and bytes; only an invalid
			// UTF-8 type URL fails, which no generator writes.
			panic("marshal Any: " + err.Error())
		}
		return out
	}
	if a.GetTypeUrl() != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, a.GetTypeUrl())
	}
	if len(a.GetValue()) > 0 {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, a.GetValue())
	}
	return b
}

// appendStringField appends a proto3 string field (left out when empty).
func appendStringField(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func sizeStringField(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(s))
}

// marshal encodes sr: the version, the resources and then the type and
// nonce, in field order as proto.Marshal does. A shared response's
// resources are not copied: the returned slice refers to them (they are
// read-only), between two small buffers of this send's own fields.
func (sr *sotwResponse) marshal(pool mem.BufferPool) mem.BufferSlice {
	head := sizeStringField(drVersionInfo, sr.version)
	tail := sizeStringField(drTypeURL, sr.typeURL) + sizeStringField(drNonce, sr.nonce)
	if !sr.r.shared {
		body := 0
		for _, a := range sr.r.resources {
			body += protowire.SizeTag(drResources) + protowire.SizeBytes(anySize(a))
		}
		size := head + body + tail
		var buf *[]byte
		if mem.IsBelowBufferPoolingThreshold(size) {
			b := make([]byte, 0, size)
			buf = &b
		} else {
			buf = pool.Get(size)
		}
		b := appendStringField((*buf)[:0], drVersionInfo, sr.version)
		b = appendResources(b, sr.r.resources)
		b = appendStringField(b, drTypeURL, sr.typeURL)
		*buf = appendStringField(b, drNonce, sr.nonce)
		if mem.IsBelowBufferPoolingThreshold(size) {
			return mem.BufferSlice{mem.SliceBuffer(*buf)}
		}
		return mem.BufferSlice{mem.NewBuffer(buf, pool)}
	}
	body := sr.r.wire()
	own := make([]byte, 0, head+tail)
	own = appendStringField(own, drVersionInfo, sr.version)
	own = appendStringField(own, drTypeURL, sr.typeURL)
	own = appendStringField(own, drNonce, sr.nonce)
	out := make(mem.BufferSlice, 0, 3)
	if head > 0 {
		out = append(out, mem.SliceBuffer(own[:head]))
	}
	if len(body) > 0 {
		out = append(out, mem.SliceBuffer(body))
	}
	if tail > 0 {
		out = append(out, mem.SliceBuffer(own[head:]))
	}
	return out
}
