package model

import (
	"os"
	"testing"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// stdDecoder is the decoder the fast path stands in for.
func stdDecoder(key ObjectKey) func([]byte) (*entry, error) {
	if key.isService() {
		return stdService
	}
	return stdEndpointSlice
}

// BenchmarkDecode decodes one Service and one EndpointSlice (10 endpoints)
// of the benchmark mesh's shape (testdata/decode, as ingest records them):
// the per-record CPU of replay that is JSON decoding; with decode (the
// fast path), with encoding/json alone (what it replaces), and from the
// compact form a snapshot keeps.
func BenchmarkDecode(b *testing.B) {
	for _, c := range []struct {
		name string
		key  ObjectKey
		file string
	}{
		{"Service", ObjectKey{Cluster: "c1", Kind: KindService, Namespace: "ns-00", Name: "svc-00000"}, "testdata/decode/service.json"},
		{"EndpointSlice", ObjectKey{Cluster: "c1", Group: GroupDiscovery, Kind: KindEndpointSlice, Namespace: "ns-00", Name: "svc-00000-0"}, "testdata/decode/endpointslice.json"},
	} {
		raw, err := os.ReadFile(c.file)
		if err != nil {
			b.Fatal(err)
		}
		ref := &pb.ObjectRef{Group: c.key.Group, Kind: c.key.Kind, Namespace: c.key.Namespace, Name: c.key.Name}
		compact := CompactForm(&pb.ChangeRecord{Cluster: c.key.Cluster, Ref: ref, Op: pb.Op_OP_ADD, Uid: "u", ResourceVersion: "1", Object: raw})
		if compact == nil {
			b.Fatalf("%s: no compact form", c.name)
		}
		for _, d := range []struct {
			name   string
			decode func([]byte) (*entry, error)
		}{
			{"decode", func(raw []byte) (*entry, error) { return decode(c.key, raw) }},
			{"encoding_json", stdDecoder(c.key)},
			// What a frontend starting from a snapshot decodes instead
			// (the record's key and fields included).
			{"compact", func([]byte) (*entry, error) { d, err := DecodeCompact(compact); return d.e, err }},
		} {
			b.Run(c.name+"/"+d.name, func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(raw)))
				for b.Loop() {
					e, err := d.decode(raw)
					if err != nil || (e.svc == nil && e.slice == nil) {
						b.Fatalf("decode: %v", err)
					}
				}
			})
		}
	}
}
