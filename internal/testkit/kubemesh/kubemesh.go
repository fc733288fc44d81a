// Package kubemesh writes the benchmark mesh of ingest's informer source
// into a real kube-apiserver: Services over Namespaces namespaces, each
// with one EndpointSlice of Endpoints ready endpoints, as the EndpointSlice
// controller writes them. BenchmarkKubeIngest (services/ingest) and
// pwbench's records measurement share it.
package kubemesh

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
)

const (
	// Namespaces the services are spread over.
	Namespaces = 10
	// Endpoints of each service's EndpointSlice.
	Endpoints = 10
	// writers create and patch objects concurrently.
	writers = 32
)

// Client is a client for writing the mesh: protobuf, limited only by the
// apiserver.
func Client(cfg *rest.Config) (kubernetes.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	return kubernetes.NewForConfig(cfg)
}

// SliceRef names one EndpointSlice.
type SliceRef struct{ Namespace, Name string }

// Namespace is the namespace of service i.
func Namespace(i int) string { return fmt.Sprintf("mesh-%02d", i%Namespaces) }

// Slices names the EndpointSlices of the first n services.
func Slices(n int) []SliceRef {
	out := make([]SliceRef, n)
	for i := range out {
		out[i] = SliceRef{Namespace(i), fmt.Sprintf("svc-%05d-abcde", i)}
	}
	return out
}

// endpointIP is endpoint e of service i at generation gen.
func endpointIP(i, e, gen int) string {
	n := i*Endpoints + e
	return fmt.Sprintf("10.%d.%d.%d", 64+gen%64, n/250%250, n%250+1)
}

func endpointList(i, gen int) []discoveryv1.Endpoint {
	out := make([]discoveryv1.Endpoint, Endpoints)
	for e := range out {
		pod := fmt.Sprintf("svc-%05d-%d", i, e)
		out[e] = discoveryv1.Endpoint{
			Addresses:  []string{endpointIP(i, e, gen)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			NodeName:   ptr.To(fmt.Sprintf("node-%d", e%3)),
			Zone:       ptr.To("zone-a"),
			TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: Namespace(i), Name: pod},
		}
	}
	return out
}

// Create creates the namespaces, then the Services and EndpointSlices,
// writers at a time, and podsPer of the Pods each slice's endpoints name
// (at most Endpoints): sidecar-injected, on their node, without a status
// (nothing runs them).
func Create(ctx context.Context, kube kubernetes.Interface, services, podsPer int) error {
	for n := range Namespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace(n), Labels: map[string]string{"istio-injection": "enabled"}}}
		if _, err := kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return parallel(services, func(i int) error {
		name, ns := fmt.Sprintf("svc-%05d", i), Namespace(i)
		labels := map[string]string{"app": name, "version": "v1"}
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Spec: corev1.ServiceSpec{
				Selector: labels,
				Ports: []corev1.ServicePort{
					{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP},
					{Name: "grpc", Port: 9090, Protocol: corev1.ProtocolTCP, AppProtocol: ptr.To("grpc")},
				},
			},
		}
		if _, err := kube.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			return err
		}
		es := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{
				Name:   name + "-abcde",
				Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io"},
			},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints:   endpointList(i, 0),
			Ports: []discoveryv1.EndpointPort{
				{Name: ptr.To("http"), Port: ptr.To[int32](8080), Protocol: ptr.To(corev1.ProtocolTCP)},
				{Name: ptr.To("grpc"), Port: ptr.To[int32](9090), Protocol: ptr.To(corev1.ProtocolTCP), AppProtocol: ptr.To("grpc")},
			},
		}
		if _, err := kube.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{}); err != nil {
			return err
		}
		for e, ep := range es.Endpoints[:min(podsPer, Endpoints)] {
			pod := &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{
					Name:   ep.TargetRef.Name,
					Labels: map[string]string{"app": name, "version": "v1", "security.istio.io/tlsMode": "istio", "service.istio.io/canonical-name": name},
					Annotations: map[string]string{"sidecar.istio.io/status": `{"initContainers":["istio-init"],"containers":["istio-proxy"],"volumes":["istio-envoy"]}`,
						"prometheus.io/scrape": "true"},
				},
				Spec: corev1.PodSpec{
					NodeName:           fmt.Sprintf("node-%d", e%3),
					ServiceAccountName: "default",
					Containers: []corev1.Container{
						{Name: "app", Image: "app:1", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "grpc", ContainerPort: 9090}}},
						{Name: "istio-proxy", Image: "proxyv2:1", Args: []string{"proxy", "sidecar"}, Ports: []corev1.ContainerPort{{Name: "http-envoy-prom", ContainerPort: 15090}}},
					},
				},
			}
			if _, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
				return err
			}
		}
		return nil
	})
}

// Patch moves every slice's endpoints to generation gen.
func Patch(ctx context.Context, kube kubernetes.Interface, slices []SliceRef, gen int) error {
	return parallel(len(slices), func(i int) error {
		var sb strings.Builder
		sb.WriteString(`{"endpoints":[`)
		for e, ep := range endpointList(i, gen) {
			if e > 0 {
				sb.WriteByte(',')
			}
			fmt.Fprintf(&sb, `{"addresses":[%q],"conditions":{"ready":true,"serving":true,"terminating":false},"nodeName":%q,"zone":"zone-a","targetRef":{"kind":"Pod","namespace":%q,"name":%q}}`,
				ep.Addresses[0], *ep.NodeName, ep.TargetRef.Namespace, ep.TargetRef.Name)
		}
		sb.WriteString(`]}`)
		_, err := kube.DiscoveryV1().EndpointSlices(slices[i].Namespace).Patch(ctx, slices[i].Name, types.MergePatchType, []byte(sb.String()), metav1.PatchOptions{})
		return err
	})
}

// parallel runs f(0..n-1) on writers goroutines and returns the first
// error; a writer that fails stops, the others finish their share.
func parallel(n int, f func(i int) error) error {
	var (
		next atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range writers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					mu.Lock()
					errs = append(errs, fmt.Errorf("object %d: %w", i, err))
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if len(errs) > 0 {
		return errs[0]
	}
	return nil
}

// Listed counts what ingest's informer source lists and records: every
// Service, EndpointSlice, Pod, Node and Namespace.
func Listed(ctx context.Context, kube kubernetes.Interface) (int, error) {
	n := 0
	for _, list := range []func() (int, error){
		func() (int, error) {
			l, err := kube.CoreV1().Services("").List(ctx, metav1.ListOptions{})
			return len(l.Items), err
		},
		func() (int, error) {
			l, err := kube.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
			return len(l.Items), err
		},
		func() (int, error) {
			l, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			return len(l.Items), err
		},
		func() (int, error) {
			l, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
			return len(l.Items), err
		},
		func() (int, error) {
			l, err := kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
			return len(l.Items), err
		},
	} {
		k, err := list()
		if err != nil {
			return 0, err
		}
		n += k
	}
	return n, nil
}
