package model

import (
	"reflect"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// checkWire fails unless DecodeWire gives what Decode gives of what
// proto.Unmarshal makes of data, or both refuse it.
func checkWire(t *testing.T, data []byte) {
	t.Helper()
	got, gotErr := DecodeWire(data)
	rec := &pb.ChangeRecord{}
	if err := proto.Unmarshal(data, rec); err != nil {
		if gotErr == nil {
			t.Fatalf("DecodeWire took %x, which proto.Unmarshal refuses: %v", data, err)
		}
		return
	}
	if gotErr != nil {
		t.Fatalf("DecodeWire refused %x, which proto.Unmarshal takes: %v", data, gotErr)
	}
	want := Decode(rec)
	// Errors compare by text: each side made its own.
	// Every kind's entry, unexported fields included.
	opts := cmp.Options{cmp.Exporter(func(reflect.Type) bool { return true }), cmp.Comparer(func(a, b error) bool {
		return (a == nil) == (b == nil) && (a == nil || a.Error() == b.Error())
	})}
	if diff := cmp.Diff(want, got, opts); diff != "" {
		t.Fatalf("DecodeWire of %x differs from Decode(proto.Unmarshal) (-want +got):\n%s", data, diff)
	}
}

// wireSeeds are encoded records around DecodeWire's edges: the records of
// compactRecords, every field set, repeated fields and refs (merged),
// unknown fields, and wire types proto does not expect.
func wireSeeds(t testing.TB) [][]byte {
	t.Helper()
	var out [][]byte
	for _, rec := range compactRecords(t) {
		rec.ObservedAt = timestamppb.New(timestamppb.Now().AsTime())
		rec.Source = "file:a.yaml#1"
		b, err := proto.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	full := out[0]
	str := func(num protowire.Number, s string) []byte {
		return protowire.AppendString(protowire.AppendTag(nil, num, protowire.BytesType), s)
	}
	varint := func(num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(protowire.AppendTag(nil, num, protowire.VarintType), v)
	}
	cat := func(parts ...[]byte) []byte {
		var b []byte
		for _, p := range parts {
			b = append(b, p...)
		}
		return b
	}
	ref := func(fields ...[]byte) []byte {
		return protowire.AppendBytes(protowire.AppendTag(nil, wireRef, protowire.BytesType), cat(fields...))
	}
	out = append(out,
		nil,
		cat(full, str(wireCluster, "c2"), varint(wireOp, 3)), // later fields win
		cat(full, ref(str(wireName, "other"))),               // a later ref merges
		cat(ref(), varint(wireOp, 1)),                        // an empty ref is a ref
		cat(full, varint(99, 7), str(100, "x")),              // unknown fields
		cat(full, str(wireOp, "x")),                          // op of another wire type
		cat(full, varint(wireCluster, 1)),                    // cluster of another wire type
		cat(full, str(wireUID, "\xff")),                      // not UTF-8
		cat(full, ref(str(wireVersion, "\xff"))),             // not UTF-8 in the ref
		cat(full, varint(wireOp, 1<<40)),                     // an op beyond int32
		cat(full, protowire.AppendBytes(protowire.AppendTag(nil, wireObservedAt, protowire.BytesType), []byte{0xff})), // a malformed timestamp
		full[:len(full)-1], // cut short
	)
	return out
}

func TestDecodeWire(t *testing.T) {
	for _, b := range wireSeeds(t) {
		checkWire(t, b)
	}
}

func FuzzDecodeWire(f *testing.F) {
	for _, b := range wireSeeds(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkWire(t, b) })
}
