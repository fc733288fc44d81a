package e2e

import (
	"context"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/adstest"
	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

func warmService(portName string) string {
	return `apiVersion: v1
kind: Service
metadata: {name: api, namespace: default}
spec:
  clusterIP: 10.96.0.40
  ports:
  - {name: ` + portName + `, port: 80}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: api-1
  namespace: default
  labels: {kubernetes.io/service-name: api}
addressType: IPv4
ports:
- {name: ` + portName + `, port: 8080}
endpoints:
- {addresses: ["10.244.2.1"], conditions: {ready: true}}
`
}

// TestPortRenameWarmsCluster: a Service's port is renamed http→grpc under a
// connected Envoy-like client. The cluster changes (HTTP/2 options), its
// load assignment does not. The client does what Envoy does after a
// cluster update: it ACKs CDS and, re-warming the cluster, asks for EDS
// again with the same names and the latest EDS nonce. It gets the
// cluster's endpoints after that one push, with no further change and no
// timeout (issue 11 #1).
func TestPortRenameWarmsCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := t.TempDir()
	pipelinetest.WriteFile(t, dir, "api.yaml", warmService("http"))
	p := pipelinetest.Start(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	c := adstest.Dial(ctx, t, p.ADSAddr, adstest.ClientNode)
	const name = "outbound|80||api.default.svc.cluster.local"

	cds := c.Request(resource.ClusterType)
	before := adstest.Decode(t, cds, func() *cluster.Cluster { return &cluster.Cluster{} })[name]
	eds := c.Request(resource.EndpointType, name)
	if diff := cmp.Diff(map[string][]string{name: {"10.244.2.1:8080"}}, adstest.EndpointsOf(eds)); diff != "" {
		t.Fatalf("EDS before the rename (-want +got):\n%s", diff)
	}

	pipelinetest.WriteFile(t, dir, "api.yaml", warmService("grpc"))
	cds2 := c.RecvType(resource.ClusterType)
	after := adstest.Decode(t, cds2, func() *cluster.Cluster { return &cluster.Cluster{} })[name]
	if proto.Equal(before, after) {
		t.Fatalf("cluster %s did not change with the port's protocol", name)
	}
	// Envoy: ACK CDS, then re-request EDS for the warming cluster.
	c.ACK(cds2)
	c.Send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, VersionInfo: eds.GetVersionInfo(), ResponseNonce: eds.GetNonce(), ResourceNames: []string{name}})
	for {
		r, err := c.Stream.Recv()
		if err != nil {
			t.Fatalf("waiting for the warming cluster's endpoints: %v", err)
		}
		if r.GetTypeUrl() != resource.EndpointType {
			c.ACK(r)
			continue
		}
		c.ACK(r, name)
		if got := adstest.EndpointsOf(r)[name]; cmp.Equal(got, []string{"10.244.2.1:8080"}) {
			return
		}
	}
}
