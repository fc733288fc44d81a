package model

import (
	"os"
	"testing"
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
// fast path) and with encoding/json alone (what it replaces).
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
		for _, d := range []struct {
			name   string
			decode func([]byte) (*entry, error)
		}{
			{"decode", func(raw []byte) (*entry, error) { return decode(c.key, raw) }},
			{"encoding_json", stdDecoder(c.key)},
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
