package ads

import (
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

// discoveryRequestNamesField is DiscoveryRequest.resource_names, read from
// the generated descriptor rather than written out again.
var discoveryRequestNamesField = (&discovery.DiscoveryRequest{}).ProtoReflect().Descriptor().
	Fields().ByName("resource_names").Number()

// nameTable holds resource names already seen, each checked for UTF-8
// (intern.Table.Bytes).
type nameTable struct{ intern.Table }

func newNameTable() *nameTable { return &nameTable{} }

// unmarshalRequest decodes b into req as proto.Unmarshal does, with the
// resource names from the table. Anything it does not take as plainly
// well formed (a malformed field, a name that is not UTF-8) is left to
// proto.Unmarshal on the whole message, so errors are protobuf's own.
func (t *nameTable) unmarshalRequest(b []byte, req *discovery.DiscoveryRequest) error {
	// First pass: count the names and the bytes of everything else.
	names, restLen := 0, 0
	for rest := b; len(rest) > 0; {
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
		} else {
			restLen += n + m
		}
		rest = rest[n+m:]
	}
	if names == 0 {
		return proto.Unmarshal(b, req)
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
