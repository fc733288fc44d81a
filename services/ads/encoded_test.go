package ads

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// asProto is the DiscoveryResponse the codec encodes sr as.
func asProto(sr *sotwResponse) *discovery.DiscoveryResponse {
	return &discovery.DiscoveryResponse{VersionInfo: sr.version, Resources: sr.r.resources, TypeUrl: sr.typeURL, Nonce: sr.nonce}
}

// randomAny is an Any with an empty or filled type URL and value, now and
// then carrying an unknown field.
func randomAny(rng *rand.Rand) *anypb.Any {
	a := &anypb.Any{}
	if rng.IntN(5) > 0 {
		a.TypeUrl = fmt.Sprintf("type.googleapis.com/t%d", rng.IntN(100))
	}
	if rng.IntN(5) > 0 {
		a.Value = bytes.Repeat([]byte{byte(rng.IntN(256))}, rng.IntN(300))
	}
	if rng.IntN(10) == 0 {
		unknown := protowire.AppendTag(nil, 9, protowire.VarintType)
		a.ProtoReflect().SetUnknown(protowire.AppendVarint(unknown, uint64(rng.IntN(1000))))
	}
	return a
}

func randomString(rng *rand.Rand) string {
	if rng.IntN(4) == 0 {
		return ""
	}
	return fmt.Sprintf("s-%d", rng.Int64())
}

// TestSotwResponseEncodesAsProto: what the codec writes for a response is
// byte for byte proto.Marshal of the same DiscoveryResponse, for shared
// responses (resources encoded once, kept) and single ones, large and
// small, with empty fields and Anys protobuf must size itself.
func TestSotwResponseEncodesAsProto(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	codec := poolCodec{pool: newResponseBufferPool()}
	for i := range 3000 {
		r := &response{shared: rng.IntN(2) == 0}
		n := rng.IntN(8)
		if rng.IntN(20) == 0 {
			n = 400 // above gRPC's pooling threshold
		}
		for range n {
			r.resources = append(r.resources, randomAny(rng))
		}
		sr := &sotwResponse{version: randomString(rng), typeURL: randomString(rng), nonce: randomString(rng), r: r}
		want, err := proto.Marshal(asProto(sr))
		if err != nil {
			t.Fatal(err)
		}
		// Twice: the second send of a shared response uses the kept
		// encoding.
		for send := range 2 {
			got, err := codec.Marshal(sr)
			if err != nil {
				t.Fatal(err)
			}
			if b := got.Materialize(); !bytes.Equal(b, want) {
				t.Fatalf("case %d send %d (shared %v, %d resources): codec wrote %x, proto.Marshal %x", i, send, r.shared, n, b, want)
			}
			got.Free()
		}
		if r.shared != (r.encoded.Load() != nil) {
			t.Fatalf("case %d: shared %v, but encoding kept: %v", i, r.shared, r.encoded.Load() != nil)
		}
	}
}

// TestSharedResponseEncodedOnce: every connection sent one shared response
// gets the same encoded resources, not a copy.
func TestSharedResponseEncodedOnce(t *testing.T) {
	r := &response{shared: true}
	for i := range 50 {
		r.resources = append(r.resources, &anypb.Any{TypeUrl: "t", Value: []byte(fmt.Sprint(i))})
	}
	codec := poolCodec{pool: mem.DefaultBufferPool()}
	var first []byte
	for i := range 3 {
		sr := &sotwResponse{version: "v", typeURL: "t", nonce: fmt.Sprint("n", i), r: r}
		got, err := codec.Marshal(sr)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 3 {
			t.Fatalf("send %d: %d buffers, want version, resources, type and nonce in 3", i, len(got))
		}
		body := got[1].ReadOnlyData()
		if first == nil {
			first = body
		} else if &body[0] != &first[0] {
			t.Fatalf("send %d encoded the shared resources again", i)
		}
	}
}
