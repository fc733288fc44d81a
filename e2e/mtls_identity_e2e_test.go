package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/pilotwire/pilotwire/internal/testkit/adstest"
	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

// webPod writes a pod of service web under service account sa, with a
// sidecar (Istio's tlsMode label), and the EndpointSlice naming it.
func webPod(t *testing.T, dir, name, sa, ip string) {
	t.Helper()
	pipelinetest.WriteFile(t, dir, name+"-pod.yaml", fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: %s, namespace: default, labels: {app: web, security.istio.io/tlsMode: istio}}
spec: {serviceAccountName: %s}
status: {podIP: %s}
`, name, sa, ip))
	pipelinetest.WriteFile(t, dir, name+"-slice.yaml", fmt.Sprintf(`apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: %s, namespace: default, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports:
- {name: http, port: 8080}
endpoints:
- addresses: [%q]
  targetRef: {kind: Pod, namespace: default, name: %s}
`, name, ip, name))
}

// TestNewServiceAccountReachesClients: a client's auto-mTLS cluster
// accepts the identities of the service's pods; when a pod under a new
// service account joins the service (its Pod and EndpointSlice appear, as
// in a rollout that changes the account), the client is sent a new
// cluster that accepts it too, through the whole pipeline, without any
// other change. Otherwise the client would refuse the new pods'
// certificates until some unrelated full push.
func TestNewServiceAccountReachesClients(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := t.TempDir()
	pipelinetest.WriteFile(t, dir, "web-service.yaml", `apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  clusterIP: 10.96.7.1
  ports:
  - {name: http, port: 80, targetPort: 8080}
`)
	webPod(t, dir, "web-a", "web-a", "10.1.7.1")
	p := pipelinetest.Start(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()

	const name = "outbound|80||web.default.svc.cluster.local"
	sans := func(cds map[string]*cluster.Cluster) []string {
		t.Helper()
		c := cds[name]
		if c == nil {
			return nil
		}
		for _, m := range c.GetTransportSocketMatches() {
			if m.GetName() != "tlsMode-istio" {
				continue
			}
			ctx := &tlsv3.UpstreamTlsContext{}
			if err := m.GetTransportSocket().GetTypedConfig().UnmarshalTo(ctx); err != nil {
				t.Fatal(err)
			}
			var out []string
			vc := ctx.GetCommonTlsContext().GetCombinedValidationContext().GetDefaultValidationContext()
			//lint:ignore SA1019 the field the generator fills, as Istio (pkg/xdsgen/mtls.go)
			for _, sm := range vc.GetMatchSubjectAltNames() {
				out = append(out, sm.GetExact())
			}
			slices.Sort(out)
			return out
		}
		return nil
	}
	client := adstest.Dial(ctx, t, p.ADSAddr, "sidecar~10.0.7.9~client-0.default~default.svc.cluster.local")
	cdsResp := client.Request(resource.ClusterType)
	first := sans(adstest.Decode(t, cdsResp, func() *cluster.Cluster { return &cluster.Cluster{} }))
	if want := []string{"spiffe://cluster.local/ns/default/sa/web-a"}; !slices.Equal(first, want) {
		t.Fatalf("cluster to web accepts %q, want %q", first, want)
	}
	// Like Envoy: the load assignments of the clusters, so the client is
	// among the watchers an endpoint change of web is pushed to.
	client.Request(resource.EndpointType, adstest.EDSNames(t, cdsResp)...)

	webPod(t, dir, "web-b", "web-b", "10.1.7.2")
	want := []string{"spiffe://cluster.local/ns/default/sa/web-a", "spiffe://cluster.local/ns/default/sa/web-b"}
	// Read (and ACK) what comes until a cluster to web accepting both
	// identities does; without it the stream's deadline fails the test.
	for {
		resp := client.Recv()
		names := []string(nil)
		if resp.GetTypeUrl() == resource.EndpointType {
			names = adstest.EDSNames(t, cdsResp)
		}
		client.ACK(resp, names...)
		if resp.GetTypeUrl() != resource.ClusterType {
			continue
		}
		cdsResp = resp
		if got := sans(adstest.Decode(t, resp, func() *cluster.Cluster { return &cluster.Cluster{} })); slices.Equal(got, want) {
			return
		}
	}
}
