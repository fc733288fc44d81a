package ads

import (
	"fmt"
	"strings"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/intern"
)

// requestSeeds are DiscoveryRequests as clients send them, and some no
// client should: names between the other fields, a name that is not
// UTF-8, a truncated message, names of the wrong wire type, unknown
// fields.
func requestSeeds(t testing.TB) [][]byte {
	t.Helper()
	marshal := func(m proto.Message) []byte {
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var names []string
	for i := range 100 {
		names = append(names, fmt.Sprintf("outbound|80||s%03d.default.svc.cluster.local", i))
	}
	ack := marshal(&discovery.DiscoveryRequest{
		VersionInfo: "v7", ResourceNames: names, TypeUrl: "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment",
		ResponseNonce: "fe-1-3",
	})
	first := marshal(&discovery.DiscoveryRequest{
		Node:          &core.Node{Id: "sidecar~10.0.0.1~a.default~default.svc.cluster.local"},
		ResourceNames: []string{"a", "b"}, TypeUrl: "t",
	})
	nack := marshal(&discovery.DiscoveryRequest{ResourceNames: []string{"a"}, ErrorDetail: &status.Status{Code: 3, Message: "bad"}})
	interleaved := protowire.AppendTag(nil, 3, protowire.BytesType)
	interleaved = protowire.AppendString(interleaved, "x")
	interleaved = protowire.AppendTag(interleaved, 4, protowire.BytesType)
	interleaved = protowire.AppendString(interleaved, "t")
	interleaved = protowire.AppendTag(interleaved, 3, protowire.BytesType)
	interleaved = protowire.AppendString(interleaved, "y")
	interleaved = protowire.AppendTag(interleaved, 99, protowire.VarintType) // unknown
	interleaved = protowire.AppendVarint(interleaved, 5)
	notUTF8 := protowire.AppendTag(nil, 3, protowire.BytesType)
	notUTF8 = protowire.AppendBytes(notUTF8, []byte{'a', 0xff, 'b'})
	wrongType := protowire.AppendTag(nil, 3, protowire.VarintType)
	wrongType = protowire.AppendVarint(wrongType, 1)
	long := marshal(&discovery.DiscoveryRequest{ResourceNames: []string{strings.Repeat("n", intern.DefaultMaxLen+1), "short"}})
	return [][]byte{ack, first, nack, interleaved, notUTF8, wrongType, long, ack[:len(ack)-3], nil, marshal(&discovery.DiscoveryRequest{TypeUrl: "t"})}
}

// checkSameAsProtobuf decodes b with the name table and with protobuf,
// and fails unless both fail or both give the same request.
func checkSameAsProtobuf(t *testing.T, table *nameTable, b []byte) {
	t.Helper()
	want, got := &discovery.DiscoveryRequest{}, &discovery.DiscoveryRequest{}
	wantErr := proto.Unmarshal(b, want)
	gotErr := table.unmarshalRequest(b, got)
	if (wantErr == nil) != (gotErr == nil) {
		t.Fatalf("%x: error %v, protobuf's %v", b, gotErr, wantErr)
	}
	if wantErr == nil && !proto.Equal(want, got) {
		t.Fatalf("%x: decoded %v, protobuf decodes %v", b, got, want)
	}
}

// TestUnmarshalRequestAsProtobuf: the name table decodes every seed as
// protobuf does, the first time (names new to the table) and the second
// (names from the table), and a name it already holds is not allocated
// again.
func TestUnmarshalRequestAsProtobuf(t *testing.T) {
	table := newNameTable()
	for round := range 2 {
		for i, b := range requestSeeds(t) {
			t.Run(fmt.Sprintf("round%d/seed%d", round, i), func(t *testing.T) { checkSameAsProtobuf(t, table, b) })
		}
	}
	ack := requestSeeds(t)[0]
	req := &discovery.DiscoveryRequest{}
	allocs := testing.AllocsPerRun(100, func() {
		if err := table.unmarshalRequest(ack, req); err != nil {
			t.Fatal(err)
		}
	})
	// The names slice, the other fields' bytes, and protobuf's strings for
	// the version, type and nonce; not one per name.
	if allocs > 10 {
		t.Errorf("an ACK naming 100 known resources took %v allocations", allocs)
	}
}

// FuzzUnmarshalRequest: whatever the bytes, the name table decodes them
// as protobuf does.
func FuzzUnmarshalRequest(f *testing.F) {
	for _, b := range requestSeeds(f) {
		f.Add(b)
	}
	table := newNameTable()
	f.Fuzz(func(t *testing.T, b []byte) { checkSameAsProtobuf(t, table, b) })
}
