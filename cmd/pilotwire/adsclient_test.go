package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
)

// The mesh the tests serve, in files as ingest reads them.
const meshYAML = `apiVersion: v1
kind: Service
metadata: {name: echo, namespace: default}
spec:
  clusterIP: 10.96.0.20
  ports:
  - {name: grpc, port: 8080, targetPort: 9999}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.0.30
  ports:
  - {name: http, port: 80, targetPort: http-web}
  - {name: tcp-admin, port: 9000, targetPort: 9000}
`

const webSlice = `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: shop
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports:
- {name: http, port: 8081}
- {name: tcp-admin, port: 9000}
endpoints:
- {addresses: ["10.244.1.5"], zone: zone-b}
`

func echoSlice(addrs ...string) string {
	s := `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo-1
  namespace: default
  labels: {kubernetes.io/service-name: echo}
addressType: IPv4
ports:
- {name: grpc, port: 9080}
endpoints:
`
	for _, a := range addrs {
		s += fmt.Sprintf("- {addresses: [%q], conditions: {ready: true}, zone: zone-a}\n", a)
	}
	return s
}

// testNode is a sidecar on the pod behind web (so it has inbound config).
const testNode = "sidecar~10.244.1.5~web-0.shop~shop.svc.cluster.local"

// adsClient is a raw state-of-the-world ADS client, as an Envoy sidecar.
type adsClient struct {
	t      *testing.T
	stream grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse]
	node   *core.Node
}

func newADSClient(ctx context.Context, t *testing.T, addr, node string) *adsClient {
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
	return &adsClient{t: t, stream: stream, node: &core.Node{Id: node}}
}

func (c *adsClient) send(req *discovery.DiscoveryRequest) {
	c.t.Helper()
	req.Node = c.node
	if err := c.stream.Send(req); err != nil {
		c.t.Fatalf("send %s: %v", req.GetTypeUrl(), err)
	}
}

func (c *adsClient) recv() *discovery.DiscoveryResponse {
	c.t.Helper()
	resp, err := c.stream.Recv()
	if err != nil {
		c.t.Fatalf("recv: %v", err)
	}
	return resp
}

// request subscribes to typeURL, returns the response and ACKs it.
func (c *adsClient) request(typeURL string, names ...string) *discovery.DiscoveryResponse {
	c.t.Helper()
	c.send(&discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names})
	resp := c.recv()
	if resp.GetTypeUrl() != typeURL {
		c.t.Fatalf("got %s, want %s", resp.GetTypeUrl(), typeURL)
	}
	c.ack(resp, names...)
	return resp
}

func (c *adsClient) ack(resp *discovery.DiscoveryResponse, names ...string) {
	c.t.Helper()
	c.send(&discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(), ResourceNames: names})
}

// nack rejects resp, keeping the version it had before (prev).
func (c *adsClient) nack(resp *discovery.DiscoveryResponse, prev, msg string, names ...string) {
	c.t.Helper()
	c.send(&discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: prev, ResponseNonce: resp.GetNonce(), ResourceNames: names,
		ErrorDetail: &rpcstatus.Status{Code: 3, Message: msg}})
}

// jsonStrings collects, sorted and unique, every string value under key in
// the resources of resp (their proto JSON): the test's own way of finding
// what an Envoy subscribes to next.
func jsonStrings(t *testing.T, resp *discovery.DiscoveryResponse, key string, keep func(obj map[string]any) bool) []string {
	t.Helper()
	var out []string
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if s, ok := x[key].(string); ok && (keep == nil || keep(x)) {
				out = append(out, s)
			}
			for _, e := range x {
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	for _, a := range resp.GetResources() {
		b, err := protojson.Marshal(a)
		if err != nil {
			t.Fatal(err)
		}
		var v any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		walk(v)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// edsNames are the EDS clusters of a CDS response; rdsNames the routes its
// listeners name.
func edsNames(t *testing.T, cds *discovery.DiscoveryResponse) []string {
	return jsonStrings(t, cds, "name", func(o map[string]any) bool { return o["type"] == "EDS" })
}

func rdsNames(t *testing.T, lds *discovery.DiscoveryResponse) []string {
	return jsonStrings(t, lds, "routeConfigName", nil)
}
