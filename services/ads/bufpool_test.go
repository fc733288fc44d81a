package ads

import (
	"fmt"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// TestPoolCodecRoundTrip: responses below and above grpc-go's pooling
// threshold, up to several MiB, marshal into buffers of the pool and come
// back whole; what is not a protobuf message is refused.
func TestPoolCodecRoundTrip(t *testing.T) {
	c := poolCodec{pool: newResponseBufferPool()}
	for _, size := range []int{0, 100, 40 << 10, 70 << 10, 3 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			want := &discovery.DiscoveryResponse{VersionInfo: "v1", Nonce: "n1", TypeUrl: "t",
				Resources: []*anypb.Any{{TypeUrl: "t", Value: make([]byte, size)}}}
			for i := range want.Resources[0].Value {
				want.Resources[0].Value[i] = byte(i)
			}
			data, err := c.Marshal(want)
			if err != nil {
				t.Fatal(err)
			}
			defer data.Free()
			if size >= 64<<10 {
				if got := cap(data[0].ReadOnlyData()); got >= 2*data.Len() {
					t.Errorf("a %d-byte response took a %d-byte buffer, want less than twice its size", data.Len(), got)
				}
			}
			got := &discovery.DiscoveryResponse{}
			if err := c.Unmarshal(data, got); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(want, got) {
				t.Errorf("round trip of a %d-byte resource: got a different response back", size)
			}
		})
	}
	if _, err := c.Marshal("not a message"); err == nil {
		t.Error("Marshal(string) = nil error, want one")
	}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{1})}, new(int)); err == nil {
		t.Error("Unmarshal(*int) = nil error, want one")
	}
}
