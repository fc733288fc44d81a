package ads

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

// tapConn keeps a copy of everything read from the connection.
type tapConn struct {
	net.Conn
	mu   sync.Mutex
	read bytes.Buffer
}

func (c *tapConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.mu.Lock()
	c.read.Write(p[:n])
	c.mu.Unlock()
	return n, err
}

// pings counts the PING frames (not their ACKs) among the HTTP/2 frames
// the server sent, up to the last whole frame read.
func (c *tapConn) pings(t *testing.T) int {
	t.Helper()
	c.mu.Lock()
	raw := bytes.Clone(c.read.Bytes())
	c.mu.Unlock()
	fr := http2.NewFramer(nil, bytes.NewReader(raw))
	fr.SetMaxReadFrameSize(1 << 24)
	n, frames := 0, 0
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			break // the end of what was read, perhaps within a frame
		}
		frames++
		if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
			n++
		}
	}
	if frames < 3 {
		t.Fatalf("only %d frames parsed from %d bytes the server sent", frames, len(raw))
	}
	return n
}

// TestRequestsDrawNoPings: a frontend answers requests with responses,
// not with PINGs of its own. With grpc-go's receive windows estimated from
// the bandwidth-delay product, each request (an ACK above all) that found
// no estimate under way drew a window update and a PING from the server,
// which the client then had to answer: a round of frames per push and
// proxy for nothing, since a frontend receives only small requests. Its
// receive windows are now fixed. The test reads the frames the server
// sent through a tap on the client's connection; before the fix they held
// a PING for the first request and for the ACK.
func TestRequestsDrawNoPings(t *testing.T) {
	f := startFrontend(t, meshOf(t, 2))
	ctx, cancel := context.WithTimeout(t.Context(), testutil.DefaultTimeout)
	defer cancel()
	var tapped atomic.Pointer[tapConn] // set by the dialer, on gRPC's goroutine
	cc, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
			if err != nil {
				return nil, err
			}
			tap := &tapConn{Conn: c}
			tapped.Store(tap)
			return tap, nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := &client{t: t, stream: stream, node: sidecar(), cc: cc}
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
	cds := c.recv()
	// The ACK, then a request whose response comes after every frame the
	// server wrote on reading the ACK.
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: cds.GetVersionInfo(), ResponseNonce: cds.GetNonce()})
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: clusterNames(2)})
	if eds := c.recv(); eds.GetTypeUrl() != resource.EndpointType || len(eds.GetResources()) != 2 {
		t.Fatalf("EDS response = %s with %d resources, want 2 load assignments", eds.GetTypeUrl(), len(eds.GetResources()))
	}
	if n := tapped.Load().pings(t); n != 0 {
		t.Errorf("the server sent %d PINGs while answering 3 requests, want none", n)
	}
}
