package kubesource

import (
	"encoding/json"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

// blankVersion is the content version as it was first defined: the JSON of
// a Pod or Node with its resourceVersion blank, marshalled a second time.
func blankVersion(t testing.TB, obj any) string {
	t.Helper()
	o, ok := obj.(runtime.Object)
	if !ok {
		t.Fatalf("%T is not an API object", obj)
	}
	o = o.DeepCopyObject()
	m, err := meta.Accessor(o)
	if err != nil {
		t.Fatal(err)
	}
	m.SetResourceVersion("")
	data, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return publish.ContentVersion(data)
}

func benchPod(i int) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: fmt.Sprintf("reviews-v1-7d9f8c-%05d", i), Namespace: "bookinfo", UID: "5f0c1e2a-8b7d-4c3e-9a1f-2d3c4b5a6978",
			ResourceVersion: fmt.Sprint(1000000 + i), CreationTimestamp: metav1.Unix(1764892800, 0),
			Labels: map[string]string{"app": "reviews", "version": "v1", "pod-template-hash": "7d9f8c", "security.istio.io/tlsMode": "istio",
				"service.istio.io/canonical-name": "reviews", "service.istio.io/canonical-revision": "v1"},
			Annotations: map[string]string{"sidecar.istio.io/status": `{"initContainers":["istio-init"],"containers":["istio-proxy"],"volumes":["istio-envoy"]}`,
				"kubectl.kubernetes.io/default-container": "reviews", "prometheus.io/scrape": "true"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "reviews-v1-7d9f8c", UID: "0a1b2c3d"}},
		},
		Spec: corev1.PodSpec{
			NodeName: "node-3", ServiceAccountName: "bookinfo-reviews",
			Containers: []corev1.Container{{Name: "reviews", Image: "reviews:1.20", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 9080, Protocol: corev1.ProtocolTCP}}},
				{Name: "istio-proxy", Image: "proxyv2:1.28", Ports: []corev1.ContainerPort{{Name: "http-envoy-prom", ContainerPort: 15090, Protocol: corev1.ProtocolTCP}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "10.0.0.3", PodIP: "10.244.3.17", PodIPs: []corev1.PodIP{{IP: "10.244.3.17"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	return trimPod(p)
}

func TestContentVersionCutsTheMember(t *testing.T) {
	pod := func(f func(*corev1.Pod)) *corev1.Pod {
		p := benchPod(1)
		f(p)
		return p
	}
	node := trimNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-3", UID: "n", ResourceVersion: "77", Labels: map[string]string{"topology.kubernetes.io/zone": "z1"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.3"}}}})
	for _, tc := range []struct {
		name string
		obj  any
		cut  bool // the member is cut out of the JSON, without a second marshal
	}{
		{"trimmed pod", benchPod(1), true},
		{"trimmed node", node, true},
		{"pod as listed, without its type", pod(func(p *corev1.Pod) { p.TypeMeta = metav1.TypeMeta{} }), true},
		{"resourceVersion the first member", pod(func(p *corev1.Pod) { p.TypeMeta, p.Name, p.Namespace, p.UID = metav1.TypeMeta{}, "", "", "" }), true},
		{"no resourceVersion", pod(func(p *corev1.Pod) { p.ResourceVersion = "" }), true},
		{"names that look like the member", pod(func(p *corev1.Pod) {
			p.Name, p.GenerateName, p.UID = `"resourceVersion":"1000001"`, `,"resourceVersion":"1000001",`, `{"resourceVersion":"1000001"}`
		}), true},
		{"a label and an owner that look like the member", pod(func(p *corev1.Pod) {
			p.Labels["resourceVersion"] = "1000001"
			p.OwnerReferences[0].Name = `"resourceVersion":"1000001"`
		}), true},
		{"a resourceVersion JSON escapes", pod(func(p *corev1.Pod) { p.ResourceVersion = `1<2&"3"` }), false},
		{"a resourceVersion that is not ASCII", pod(func(p *corev1.Pod) { p.ResourceVersion = "1\u2028" }), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := json.Marshal(tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			got, err := contentVersion(tc.obj, data)
			if err != nil {
				t.Fatal(err)
			}
			if want := blankVersion(t, tc.obj); got != want {
				t.Errorf("content version %q, want %q (the JSON with resourceVersion blank)", got, want)
			}
			var rv string
			if m, ok := tc.obj.(metav1.Object); ok {
				rv = m.GetResourceVersion()
			}
			if got == "" {
				t.Errorf("no content version for a %T", tc.obj)
			}
			if _, ok := withoutResourceVersion(data, rv); ok != tc.cut {
				t.Errorf("member cut out: %v, want %v", ok, tc.cut)
			}
		})
	}
}

func TestNoContentVersionForKindsKeptWhole(t *testing.T) {
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "s", ResourceVersion: "5"}}
	data, err := json.Marshal(slice)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := contentVersion(slice, data); got != "" || err != nil {
		t.Errorf("content version of an EndpointSlice: %q, %v; want none", got, err)
	}
}

// FuzzContentVersion checks that cutting the member out of the JSON gives
// the bytes of a second marshal with resourceVersion blank, whatever the
// strings before and after it hold.
func FuzzContentVersion(f *testing.F) {
	f.Add("reviews-v1", "", "bookinfo", "u-1", "1000001", "app", "reviews", true)
	f.Add(`"resourceVersion":"7"`, `,"resourceVersion":"7"`, "", "", "7", "resourceVersion", "7", false)
	f.Add("", "", "", "", "12", "", "", false)
	f.Add("a", "b", "c", "d", `"`, "k", "v", true)
	f.Fuzz(func(t *testing.T, name, generateName, namespace, uid, rv, labelKey, labelValue string, typed bool) {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, GenerateName: generateName, Namespace: namespace, UID: types.UID(uid), ResourceVersion: rv,
			Labels: map[string]string{labelKey: labelValue}, Annotations: map[string]string{labelValue: labelKey}}}
		if typed {
			p.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}
		}
		data, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err) // strings always marshal: encoding/json replaces bad UTF-8
		}
		got, err := contentVersion(p, data)
		if err != nil {
			t.Fatal(err)
		}
		if want := blankVersion(t, p); got != want {
			t.Fatalf("content version %q, want %q\nJSON %s", got, want, data)
		}
	})
}

// BenchmarkToObject is the publisher's form of one listed object: its JSON
// and, for Pods and Nodes, its content version.
func BenchmarkToObject(b *testing.B) {
	c := &cluster{origin: "bench"}
	slice := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Name: "reviews-abcde", Namespace: "bookinfo", UID: "u", ResourceVersion: "1000001",
		Labels: map[string]string{discoveryv1.LabelServiceName: "reviews"}}, AddressType: discoveryv1.AddressTypeIPv4}
	for i := range 10 {
		ready, node, zone := true, "node-3", "z1"
		slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.3.%d", i)}, Conditions: discoveryv1.EndpointConditions{Ready: &ready},
			NodeName: &node, Zone: &zone, TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "bookinfo", Name: fmt.Sprintf("reviews-v1-%d", i), UID: "p"}})
	}
	node := trimNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-3", UID: "n", ResourceVersion: "77",
		Labels: map[string]string{"topology.kubernetes.io/zone": "z1", "topology.kubernetes.io/region": "r1", "kubernetes.io/hostname": "node-3"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.3"}, {Type: corev1.NodeHostName, Address: "node-3"}}}})
	for _, bc := range []struct {
		name string
		gvk  schema.GroupVersionKind
		obj  any
	}{
		{"pod", corev1.SchemeGroupVersion.WithKind("Pod"), benchPod(1)},
		{"node", corev1.SchemeGroupVersion.WithKind("Node"), node},
		{"endpointslice", discoveryv1.SchemeGroupVersion.WithKind("EndpointSlice"), slice},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.toObject(bc.gvk, bc.obj); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
