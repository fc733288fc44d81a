package ads

import (
	"fmt"
	"slices"
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
	// A run long enough to be kept whole: the same names as the ACK's
	// first ten under another version and nonce, the run with a name
	// that is not UTF-8, and with an unknown field after it.
	ackAgain := marshal(&discovery.DiscoveryRequest{VersionInfo: "v8", ResourceNames: names[:10], TypeUrl: "t", ResponseNonce: "fe-1-4"})
	var runNotUTF8 []byte
	for i := range 10 {
		runNotUTF8 = protowire.AppendTag(runNotUTF8, 3, protowire.BytesType)
		if i == 5 {
			runNotUTF8 = protowire.AppendBytes(runNotUTF8, []byte{0xc3})
			continue
		}
		runNotUTF8 = protowire.AppendString(runNotUTF8, names[i])
	}
	runUnknown := protowire.AppendTag(append([]byte(nil), ackAgain...), 99, protowire.BytesType)
	runUnknown = protowire.AppendString(runUnknown, "u")
	return [][]byte{ack, first, nack, interleaved, notUTF8, wrongType, long, ack[:len(ack)-3], nil, marshal(&discovery.DiscoveryRequest{TypeUrl: "t"}),
		ackAgain, runNotUTF8, runUnknown}
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
	// protobuf's strings for the version, type and nonce; not one per
	// name, nor the names slice, which the run's requests share.
	if allocs > 4 {
		t.Errorf("an ACK naming 100 known resources took %v allocations", allocs)
	}
}

// TestRunsShareTheirNames: requests that carry the same run of names get
// one slice of them; a run that differs in one byte, or in the number of
// names, is not taken for one held under the same hash.
func TestRunsShareTheirNames(t *testing.T) {
	table := newNameTable()
	seeds := requestSeeds(t)
	first, again := &discovery.DiscoveryRequest{}, &discovery.DiscoveryRequest{}
	for _, r := range []*discovery.DiscoveryRequest{first, again} {
		if err := table.unmarshalRequest(seeds[0], r); err != nil {
			t.Fatal(err)
		}
	}
	if len(first.ResourceNames) != 100 || &first.ResourceNames[0] != &again.ResourceNames[0] {
		t.Errorf("two ACKs of the same 100 names hold %d and %d names in separate slices", len(first.ResourceNames), len(again.ResourceNames))
	}
	names := first.ResourceNames[:10:10]
	run := func(ns ...string) []byte {
		var b []byte
		for _, n := range ns {
			b = protowire.AppendTag(b, 3, protowire.BytesType)
			b = protowire.AppendString(b, n)
		}
		return b
	}
	changed := slices.Clone(names)
	changed[9] = changed[9][:len(changed[9])-1] + "x"
	for _, tc := range []struct {
		name string
		run  []byte
		want bool
	}{
		{name: "the same names", run: run(names...), want: true},
		{name: "one byte differs", run: run(changed...)},
		{name: "one name fewer", run: run(names[:9]...)},
		{name: "one name more", run: run(append(slices.Clone(names), "extra")...)},
	} {
		if got := runHolds(tc.run, names); got != tc.want {
			t.Errorf("%s: runHolds = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestRunsStartOverWhenFull: the runs kept are bounded in names and in
// bytes; past either bound they start over, and the newest run is kept.
func TestRunsStartOverWhenFull(t *testing.T) {
	held := func(r *nameRuns, h uint64) bool {
		r.mu.RLock()
		defer r.mu.RUnlock()
		_, ok := r.runs[h]
		return ok
	}
	for _, tc := range []struct {
		name  string
		names int
		bytes int
	}{
		{name: "bytes", names: minRunNames, bytes: maxRunBytes/2 + 1},
		{name: "names", names: maxRunNames/2 + 1, bytes: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r nameRuns
			names := make([]string, tc.names)
			r.put(1, names, tc.bytes)
			r.put(1, names, tc.bytes) // the same run again replaces it
			if !held(&r, 1) || r.names != tc.names || r.bytes != tc.bytes {
				t.Fatalf("after one run put twice: held %v, %d names, %d bytes; want %d, %d", held(&r, 1), r.names, r.bytes, tc.names, tc.bytes)
			}
			r.put(2, names, tc.bytes)
			if held(&r, 1) || !held(&r, 2) || r.names != tc.names || r.bytes != tc.bytes {
				t.Errorf("past the bound: run 1 held %v, run 2 held %v, %d names, %d bytes; want only run 2", held(&r, 1), held(&r, 2), r.names, r.bytes)
			}
		})
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

// BenchmarkUnmarshalACK decodes the EDS ACK of a sidecar that knows 100
// clusters, as every proxy of a fleet sends after a push, from goroutines
// on every core as the frontend's streams do.
func BenchmarkUnmarshalACK(b *testing.B) {
	ack := requestSeeds(b)[0]
	table := newNameTable()
	if err := table.unmarshalRequest(ack, &discovery.DiscoveryRequest{}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		req := &discovery.DiscoveryRequest{}
		for pb.Next() {
			if err := table.unmarshalRequest(ack, req); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
