// Package adstest is a raw state-of-the-world ADS client for tests, as an
// Envoy sidecar speaks it (built on go-control-plane's protos, no xDS
// library in between), with the small mesh the tests serve and helpers
// that decode what it receives.
package adstest

import (
	"context"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
)

// Node ids of the proxies the tests play.
const (
	// ClientNode is a sidecar on a pod behind no service.
	ClientNode = "sidecar~10.244.0.7~client-0.default~default.svc.cluster.local"
	// WebNode is a sidecar on the pod behind web (WebSlice's endpoint), so
	// it has inbound config.
	WebNode = "sidecar~10.244.1.5~web-0.shop~shop.svc.cluster.local"
)

// Client is one ADS stream. Its methods fail the test on any error; a
// test that must not block past a deadline reads Stream itself.
type Client struct {
	t testing.TB
	// Stream is the ADS stream; Node is sent with every request (set it
	// before the first to play another proxy).
	Stream grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse]
	Node   *core.Node
}

// Dial opens an ADS stream to addr as the proxy node (a node id), closed
// when ctx ends or at the end of the test.
func Dial(ctx context.Context, t testing.TB, addr, node string) *Client {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &Client{t: t, Stream: stream, Node: &core.Node{Id: node}}
}

// Send sends req with the client's node.
func (c *Client) Send(req *discovery.DiscoveryRequest) {
	c.t.Helper()
	req.Node = c.Node
	if err := c.Stream.Send(req); err != nil {
		c.t.Fatalf("send %s: %v", req.GetTypeUrl(), err)
	}
}

// Recv returns the next response, of any type.
func (c *Client) Recv() *discovery.DiscoveryResponse {
	c.t.Helper()
	resp, err := c.Stream.Recv()
	if err != nil {
		c.t.Fatalf("recv: %v", err)
	}
	return resp
}

// RecvType returns the next response and fails the test unless it is of
// typeURL.
func (c *Client) RecvType(typeURL string) *discovery.DiscoveryResponse {
	c.t.Helper()
	resp, err := c.Stream.Recv()
	if err != nil {
		c.t.Fatalf("recv (want %s): %v", typeURL, err)
	}
	if resp.GetTypeUrl() != typeURL {
		c.t.Fatalf("got a response of type %s, want %s", resp.GetTypeUrl(), typeURL)
	}
	return resp
}

// Request subscribes to names of typeURL (none: a wildcard type), returns
// the response and ACKs it.
func (c *Client) Request(typeURL string, names ...string) *discovery.DiscoveryResponse {
	c.t.Helper()
	c.Send(&discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names})
	resp := c.RecvType(typeURL)
	c.ACK(resp, names...)
	return resp
}

// ACK accepts resp, subscribed to names.
func (c *Client) ACK(resp *discovery.DiscoveryResponse, names ...string) {
	c.t.Helper()
	c.Send(&discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(), ResourceNames: names})
}

// NACK rejects resp with msg, keeping the version it had before (prev).
func (c *Client) NACK(resp *discovery.DiscoveryResponse, prev, msg string, names ...string) {
	c.t.Helper()
	c.Send(&discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: prev, ResponseNonce: resp.GetNonce(), ResourceNames: names,
		ErrorDetail: &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: msg}})
}
