package k8stest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	"github.com/pilotwire/pilotwire/internal/testkit/k8stest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

// testutil.DefaultTimeout bounds every API call a test makes once the cluster is
// up (the cluster's own start-up has its own, longer bound).

// TestMain checks that no goroutine outlives the tests. Each cluster's
// children are stopped in t.Cleanup, which closes every client connection
// from the server side, so client-go's connection goroutines end too; no
// goroutine needs to be ignored.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func clientsets(t *testing.T, c *k8stest.Cluster) (*kubernetes.Clientset, *apiextensionsclient.Clientset, *dynamic.DynamicClient) {
	t.Helper()
	kube, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatalf("kubernetes client: %v", err)
	}
	ext, err := apiextensionsclient.NewForConfig(c.Config)
	if err != nil {
		t.Fatalf("apiextensions client: %v", err)
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatalf("dynamic client: %v", err)
	}
	return kube, ext, dyn
}

// TestCluster exercises one cluster the way the Kubernetes source will:
// core objects, an Istio-style CRD and a custom resource, and a kubeconfig.
func TestCluster(t *testing.T) {
	c := k8stest.Start(t)
	kube, ext, dyn := clientsets(t, c)

	t.Run("services and endpointslices", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
		defer cancel()
		const ns = "bookinfo"
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
			ObjectMeta: metav1.ObjectMeta{Name: ns},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create namespace: %v", err)
		}
		svc, err := kube.CoreV1().Services(ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "reviews", Labels: map[string]string{"app": "reviews"}},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{"app": "reviews"},
				Ports: []corev1.ServicePort{{
					Name: "http", Port: 9080, TargetPort: intstr.FromInt32(9080), Protocol: corev1.ProtocolTCP,
				}},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create service: %v", err)
		}
		if svc.Spec.ClusterIP == "" || !strings.HasPrefix(svc.Spec.ClusterIP, "10.96.") {
			t.Errorf("service ClusterIP = %q, want one from 10.96.0.0/16", svc.Spec.ClusterIP)
		}
		if _, err := kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name:   "reviews-abc12",
				Labels: map[string]string{discoveryv1.LabelServiceName: "reviews"},
			},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{"10.244.1.5"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
				{Addresses: []string{"10.244.2.7"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
			},
			Ports: []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](9080), Protocol: ptr.To(corev1.ProtocolTCP)}},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create endpointslice: %v", err)
		}

		type endpoint struct {
			Addr  string
			Ready bool
		}
		type view struct {
			Service   string
			ClusterIP string
			Ports     []int32
			Endpoints []endpoint
		}
		svcs, err := kube.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list services: %v", err)
		}
		slices, err := kube.DiscoveryV1().EndpointSlices(ns).List(ctx, metav1.ListOptions{
			LabelSelector: discoveryv1.LabelServiceName + "=reviews",
		})
		if err != nil {
			t.Fatalf("list endpointslices: %v", err)
		}
		var got []view
		for _, s := range svcs.Items {
			v := view{Service: s.Name, ClusterIP: s.Spec.ClusterIP}
			for _, p := range s.Spec.Ports {
				v.Ports = append(v.Ports, p.Port)
			}
			for _, es := range slices.Items {
				for _, e := range es.Endpoints {
					v.Endpoints = append(v.Endpoints, endpoint{Addr: e.Addresses[0], Ready: ptr.Deref(e.Conditions.Ready, false)})
				}
			}
			got = append(got, v)
		}
		want := []view{{
			Service:   "reviews",
			ClusterIP: svc.Spec.ClusterIP,
			Ports:     []int32{9080},
			Endpoints: []endpoint{{"10.244.1.5", true}, {"10.244.2.7", false}},
		}}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("listed services and endpoints (-want +got):\n%s", diff)
		}
	})

	t.Run("namespace lifecycle admission", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
		defer cancel()
		_, err := kube.CoreV1().ConfigMaps("no-such-namespace").Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "x"},
		}, metav1.CreateOptions{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("create in missing namespace: err = %v, want NotFound", err)
		}
	})

	t.Run("CRD and custom resource", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
		defer cancel()
		installVirtualServiceCRD(ctx, t, ext)

		gvr := schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "virtualservices"}
		spec := map[string]any{
			"hosts": []any{"reviews.bookinfo.svc.cluster.local"},
			"http": []any{map[string]any{
				"route": []any{map[string]any{
					"destination": map[string]any{"host": "reviews", "subset": "v2"},
					"weight":      int64(100),
				}},
			}},
		}
		vs := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "networking.istio.io/v1",
			"kind":       "VirtualService",
			"metadata":   map[string]any{"name": "reviews-route", "namespace": "default"},
			"spec":       spec,
		}}
		if _, err := dyn.Resource(gvr).Namespace("default").Create(ctx, vs, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create VirtualService: %v", err)
		}
		list, err := dyn.Resource(gvr).Namespace("default").List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatalf("list VirtualServices: %v", err)
		}
		if len(list.Items) != 1 {
			t.Fatalf("listed %d VirtualServices, want 1", len(list.Items))
		}
		if diff := cmp.Diff(spec, list.Items[0].Object["spec"]); diff != "" {
			t.Errorf("VirtualService spec (-want +got):\n%s", diff)
		}
	})

	t.Run("kubeconfig", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
		defer cancel()
		cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
		if err != nil {
			t.Fatalf("load kubeconfig: %v", err)
		}
		if cfg.Host != c.Config.Host {
			t.Errorf("kubeconfig server = %q, want %q", cfg.Host, c.Config.Host)
		}
		kc, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatalf("client from kubeconfig: %v", err)
		}
		if _, err := kc.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
			t.Errorf("get default namespace through kubeconfig: %v", err)
		}
	})
}

// installVirtualServiceCRD installs a minimal networking.istio.io
// VirtualService CRD and waits until it is Established.
func installVirtualServiceCRD(ctx context.Context, t *testing.T, ext apiextensionsclient.Interface) {
	t.Helper()
	crd := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "virtualservices.networking.istio.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "networking.istio.io",
			Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{
				Plural: "virtualservices", Singular: "virtualservice", Kind: "VirtualService",
				ListKind: "VirtualServiceList", ShortNames: []string{"vs"},
			},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{
					OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
						Type: "object",
						Properties: map[string]apiextensionsv1.JSONSchemaProps{
							"spec":   {Type: "object", XPreserveUnknownFields: ptr.To(true)},
							"status": {Type: "object", XPreserveUnknownFields: ptr.To(true)},
						},
					},
				},
			}},
		},
	}
	if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create CRD: %v", err)
	}
	ticker := time.NewTicker(50 * time.Millisecond)
	defer ticker.Stop()
	for {
		got, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get CRD: %v", err)
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("CRD %s not Established: %v; conditions %+v", crd.Name, ctx.Err(), got.Status.Conditions)
		case <-ticker.C:
		}
	}
}

// TestRestartAPIServer stops only the apiserver, as a test of an informer's
// reconnect would, and checks that objects and resource versions survive.
func TestRestartAPIServer(t *testing.T) {
	c := k8stest.Start(t)
	kube, _, _ := clientsets(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*testutil.DefaultTimeout)
	defer cancel()

	cm, err := kube.CoreV1().ConfigMaps("default").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "survivor"},
		Data:       map[string]string{"k": "v"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create configmap: %v", err)
	}

	c.StopAPIServer()
	if _, err := kube.CoreV1().ConfigMaps("default").Get(ctx, "survivor", metav1.GetOptions{}); err == nil {
		t.Fatalf("get with the apiserver stopped succeeded")
	}

	c.RestartAPIServer(t)
	got, err := kube.CoreV1().ConfigMaps("default").Get(ctx, "survivor", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get after restart: %v", err)
	}
	if diff := cmp.Diff(
		[]string{cm.ResourceVersion, "v"},
		[]string{got.ResourceVersion, got.Data["k"]},
	); diff != "" {
		t.Errorf("configmap after restart (-want +got):\n%s", diff)
	}

	c.Stop()
	c.Stop() // idempotent
}

// TestTwoClusters checks that clusters started side by side are independent.
func TestTwoClusters(t *testing.T) {
	a, b := k8stest.Start(t), k8stest.Start(t)
	if a.Config.Host == b.Config.Host {
		t.Fatalf("both clusters at %s", a.Config.Host)
	}
	kubeA, _, _ := clientsets(t, a)
	kubeB, _, _ := clientsets(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()

	if _, err := kubeA.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{Name: "only-in-a"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace in a: %v", err)
	}
	tests := []struct {
		name    string
		kube    kubernetes.Interface
		wantErr bool
	}{
		{name: "a has it", kube: kubeA},
		{name: "b does not", kube: kubeB, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.kube.CoreV1().Namespaces().Get(ctx, "only-in-a", metav1.GetOptions{})
			if tt.wantErr != apierrors.IsNotFound(err) || (!tt.wantErr && err != nil) {
				t.Errorf("get namespace only-in-a: err = %v, want NotFound: %v", err, tt.wantErr)
			}
		})
	}
}
