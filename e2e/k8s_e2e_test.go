package e2e

import (
	"context"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/pilotwire/pilotwire/internal/testkit/adstest"
	"github.com/pilotwire/pilotwire/internal/testkit/k8stest"
	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/services/ingest"
)

// TestKubernetesClustersMergeEndpoints runs the pipeline on two real
// kube-apiservers as two clusters (--kubeconfig east, --cluster west). The
// echo Service exists in both; a raw ADS client gets one load assignment
// holding the ready endpoints of both clusters, and follows changes in
// either.
func TestKubernetesClustersMergeEndpoints(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test against real kube-apiservers")
	}
	east, west := k8stest.Start(t), k8stest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	kubeEast, kubeWest := kubeClient(t, east), kubeClient(t, west)
	for _, kc := range []struct {
		kube kubernetes.Interface
		addr string
	}{{kubeEast, "10.244.0.11"}, {kubeWest, "10.245.0.21"}} {
		if _, err := kc.kube.CoreV1().Services("default").Create(ctx, echoService(), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := kc.kube.DiscoveryV1().EndpointSlices("default").Create(ctx, echoSliceObject(kc.addr), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	p := pipelinetest.Start(t, "", pipelinetest.Options{Ingest: func(c *ingest.Config) {
		c.ConfigDir = ""
		c.ClusterID = "east"
		c.Kubeconfig = east.Kubeconfig
		c.Clusters = []string{"west=" + west.Kubeconfig}
		c.EnableGatewayAPI = true
		c.ClusterSecretsNamespace = "istio-system" // the binary's default: watched, empty
	}})
	c := adstest.Dial(ctx, t, p.ADSAddr, adstest.ClientNode)

	const echoCluster = "outbound|8080||echo.default.svc.cluster.local"
	c.Request(resource.ClusterType)
	eds := c.Request(resource.EndpointType, echoCluster)
	got := adstest.LBAddrs(adstest.Decode(t, eds, func() *endpoint.ClusterLoadAssignment { return &endpoint.ClusterLoadAssignment{} })[echoCluster])
	if diff := cmp.Diff([]string{"10.244.0.11:9080", "10.245.0.21:9080"}, got); diff != "" {
		t.Fatalf("echo endpoints from two clusters (-want +got):\n%s", diff)
	}

	// A change in west alone reaches the client as EDS.
	sl, err := kubeWest.DiscoveryV1().EndpointSlices("default").Get(ctx, "echo-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sl.Endpoints = append(sl.Endpoints, echoSliceObject("10.245.0.22").Endpoints...)
	if _, err := kubeWest.DiscoveryV1().EndpointSlices("default").Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eds = c.RecvType(resource.EndpointType)
	c.ACK(eds, echoCluster)
	got = adstest.LBAddrs(adstest.Decode(t, eds, func() *endpoint.ClusterLoadAssignment { return &endpoint.ClusterLoadAssignment{} })[echoCluster])
	if diff := cmp.Diff([]string{"10.244.0.11:9080", "10.245.0.21:9080", "10.245.0.22:9080"}, got); diff != "" {
		t.Errorf("echo endpoints after west scaled up (-want +got):\n%s", diff)
	}

	// East's slice goes away: only west's endpoints remain.
	if err := kubeEast.DiscoveryV1().EndpointSlices("default").Delete(ctx, "echo-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eds = c.RecvType(resource.EndpointType)
	got = adstest.LBAddrs(adstest.Decode(t, eds, func() *endpoint.ClusterLoadAssignment { return &endpoint.ClusterLoadAssignment{} })[echoCluster])
	if diff := cmp.Diff([]string{"10.245.0.21:9080", "10.245.0.22:9080"}, got); diff != "" {
		t.Errorf("echo endpoints after east's slice was deleted (-want +got):\n%s", diff)
	}
	c.ACK(eds, echoCluster)

	// A Service created, changed and deleted in west reaches the client as
	// CDS (the whole set each time, in state of the world).
	const kubeCluster = "outbound|443||kubernetes.default.svc.cluster.local" // the apiserver's own Service
	// Every sidecar also has Istio's passthrough and blackhole clusters.
	clustersOf := func(r *discovery.DiscoveryResponse) []string {
		var out []string
		for _, n := range keys(adstest.Decode(t, r, func() *cluster.Cluster { return &cluster.Cluster{} })) {
			if !strings.HasSuffix(n, "Cluster") {
				out = append(out, n)
			}
		}
		return out
	}
	web := echoService()
	web.Name = "web"
	if _, err := kubeWest.CoreV1().Services("default").Create(ctx, web, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cds := c.RecvType(resource.ClusterType)
	c.ACK(cds)
	if diff := cmp.Diff([]string{kubeCluster, echoCluster, "outbound|8080||web.default.svc.cluster.local"}, clustersOf(cds)); diff != "" {
		t.Errorf("clusters after web was created (-want +got):\n%s", diff)
	}
	web, err = kubeWest.CoreV1().Services("default").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	web.Spec.Ports[0].Port = 8081
	if _, err := kubeWest.CoreV1().Services("default").Update(ctx, web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cds = c.RecvType(resource.ClusterType)
	c.ACK(cds)
	if diff := cmp.Diff([]string{kubeCluster, echoCluster, "outbound|8081||web.default.svc.cluster.local"}, clustersOf(cds)); diff != "" {
		t.Errorf("clusters after web's port changed (-want +got):\n%s", diff)
	}
	if err := kubeWest.CoreV1().Services("default").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cds = c.RecvType(resource.ClusterType)
	if diff := cmp.Diff([]string{kubeCluster, echoCluster}, clustersOf(cds)); diff != "" {
		t.Errorf("clusters after web was deleted (-want +got):\n%s", diff)
	}
}

func kubeClient(t *testing.T, c *k8stest.Cluster) kubernetes.Interface {
	t.Helper()
	kube, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

func echoService() *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: "default"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
			{Name: "grpc", Port: 8080, TargetPort: intstr.FromInt32(9080), Protocol: corev1.ProtocolTCP},
		}},
	}
}

// echoSliceObject is echo's slice with one ready endpoint per address.
// Loopback addresses are refused by EndpointSlice validation, hence
// 10.244/10.245.
func echoSliceObject(addrs ...string) *discoveryv1.EndpointSlice {
	sl := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "echo-1", Namespace: "default", Labels: map[string]string{discoveryv1.LabelServiceName: "echo"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("grpc"), Port: ptr.To[int32](9080)}},
	}
	for _, a := range addrs {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{a},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)},
			Zone:       ptr.To("zone-a"),
		})
	}
	return sl
}
