package kubesource_test

import (
	"fmt"
	"io"
	"net/http"
	"path"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/pilotwire/pilotwire/internal/testkit/k8stest"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/services/ingest/internal/ingesttest"
	"github.com/pilotwire/pilotwire/services/ingest/kubesource"
	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

var gvrHTTPRoute = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1", Resource: "httproutes"}

// TestGatewayStatusWriter: the active ingest of a cluster writes the
// computed conditions to an HTTPRoute (BackendNotFound while its backend
// Service is missing, ResolvedRefs once it exists), with the route's
// generation; a standby ingest of the same cluster writes nothing.
func TestGatewayStatusWriter(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test against a real kube-apiserver")
	}
	a := k8stest.Start(t)
	waitBootstrapped(t, a)
	for _, plural := range []string{"gateways", "httproutes", "grpcroutes", "referencegrants"} {
		installCRD(t, a.Config, gatewayCRD(t, plural))
	}
	w := newWorld(t)
	ctx := testCtx(t)
	kv, err := bus.EnsureKV(ctx, w.js, names.LeaseConfig(bus.StreamOptions{Memory: true}))
	if err != nil {
		t.Fatal(err)
	}
	opts := func(holder string) kubesource.Options {
		return kubesource.Options{
			Clusters: alpha(a), EnableGatewayAPI: true, GatewayStatusDebounce: 20 * time.Millisecond,
			Lease: publish.LeaseOptions{KV: kv, Holder: holder, TTL: time.Second},
		}
	}
	active := w.start(t, opts("active"))
	waitState(t, active, kubesource.StateSynced)
	// The standby has its own registry, so that its metrics are its own.
	standbyWorld := &world{js: w.js, reg: prometheus.NewRegistry(), logs: w.logs}
	standby := standbyWorld.start(t, opts("standby"))
	waitState(t, standby, kubesource.StateStandby)

	kube := kubeClient(t, a.Config)
	createNamespace(t, kube, "shop")
	if _, err := kube.CoreV1().Services("shop").Create(ctx, service("web", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(a.Config)
	if err != nil {
		t.Fatal(err)
	}
	route := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
		"metadata": map[string]any{"name": "web", "namespace": "shop"},
		"spec": map[string]any{
			"parentRefs": []any{map[string]any{"group": "", "kind": "Service", "name": "web"}},
			"rules":      []any{map[string]any{"backendRefs": []any{map[string]any{"name": "backend", "port": int64(8080)}}}},
		},
	}}
	created, err := dyn.Resource(gvrHTTPRoute).Namespace("shop").Create(ctx, route, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gen := created.GetGeneration()

	waitResolvedRefs(t, dyn, "False", string(gwv1.RouteReasonBackendNotFound), gen)
	if _, err := kube.CoreV1().Services("shop").Create(ctx, service("backend", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitResolvedRefs(t, dyn, "True", string(gwv1.RouteReasonResolvedRefs), gen)

	// Two statuses, two writes: rounds that change nothing (those our own
	// writes trigger) write nothing.
	ingesttest.WaitFor(t, ctx, "two HTTPRoute status writes", func() (bool, string) {
		n := w.metric(t, "pilotwire_ingest_gateway_status_writes_total", map[string]string{"cluster": "alpha", "kind": "HTTPRoute"})
		return n == 2, fmt.Sprint(n)
	})
	if n := standbyWorld.metric(t, "pilotwire_ingest_gateway_status_writes_total", map[string]string{"cluster": "alpha"}); n != 0 {
		t.Errorf("standby instance wrote %v statuses, want none", n)
	}
	if st, _ := standby.status("alpha"); st.State != kubesource.StateStandby {
		t.Errorf("second instance is %s, want standby", st.State)
	}
}

// waitState waits until cluster alpha of r is in state.
func waitState(t *testing.T, r *run, state kubesource.State) {
	t.Helper()
	ingesttest.WaitFor(t, testCtx(t), "cluster alpha "+string(state), func() (bool, string) {
		st, _ := r.status("alpha")
		return st.State == state, string(st.State)
	})
}

// waitResolvedRefs waits until route shop/web's one parent status has
// Accepted=True and ResolvedRefs with status and reason, observed at gen.
func waitResolvedRefs(t *testing.T, dyn dynamic.Interface, status, reason string, gen int64) {
	t.Helper()
	ctx := testCtx(t)
	ingesttest.WaitFor(t, ctx, "HTTPRoute ResolvedRefs="+status+"/"+reason, func() (bool, string) {
		u, err := dyn.Resource(gvrHTTPRoute).Namespace("shop").Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		var r gwv1.HTTPRoute
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &r); err != nil {
			return false, err.Error()
		}
		if len(r.Status.Parents) != 1 {
			return false, fmt.Sprintf("%d parent statuses", len(r.Status.Parents))
		}
		p := r.Status.Parents[0]
		var got []string
		ok := p.ControllerName == "istio.io/gateway-controller"
		for _, c := range p.Conditions {
			got = append(got, fmt.Sprintf("%s=%s/%s@%d", c.Type, c.Status, c.Reason, c.ObservedGeneration))
			switch c.Type {
			case "Accepted":
				ok = ok && c.Status == "True" && c.ObservedGeneration == gen && !c.LastTransitionTime.IsZero()
			case "ResolvedRefs":
				ok = ok && string(c.Status) == status && c.Reason == reason && c.ObservedGeneration == gen
			}
		}
		return ok && len(p.Conditions) == 2, fmt.Sprintf("%s %v", p.ControllerName, got)
	})
}

// watchCounter counts the watches a client holds open, by resource: a
// watch counts from its successful response until its body is closed (a
// request retried after an error counts once).
type watchCounter struct {
	mu   sync.Mutex
	open map[string]int
}

func (c *watchCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err != nil || req.Method != http.MethodGet || resp.StatusCode != http.StatusOK {
			return resp, err
		}
		if w := req.URL.Query().Get("watch"); w == "" || w == "false" || w == "0" {
			return resp, err
		}
		resource := path.Base(req.URL.Path)
		c.mu.Lock()
		c.open[resource]++
		c.mu.Unlock()
		resp.Body = &watchBody{ReadCloser: resp.Body, done: func() {
			c.mu.Lock()
			c.open[resource]--
			c.mu.Unlock()
		}}
		return resp, nil
	})
}

func (c *watchCounter) count(resource string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open[resource]
}

type watchBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (b *watchBody) Close() error {
	b.once.Do(b.done)
	return b.ReadCloser.Close()
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// TestGatewayStatusWriterSharesWatches: the status writer reads the
// source's informers, so each cluster has one watch of each kind it reads
// (the routes, Gateways and ReferenceGrants, Services, Namespaces), not a
// second one of its own; it follows a kind whose CRD is installed after
// the start (ReferenceGrant, without which it writes nothing).
func TestGatewayStatusWriterSharesWatches(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test against a real kube-apiserver")
	}
	a := k8stest.Start(t)
	waitBootstrapped(t, a)
	for _, plural := range []string{"gateways", "httproutes", "grpcroutes"} {
		installCRD(t, a.Config, gatewayCRD(t, plural))
	}
	counter := &watchCounter{open: make(map[string]int)}
	cfg := rest.CopyConfig(a.Config)
	cfg.WrapTransport = counter.wrap
	w := newWorld(t)
	ctx := testCtx(t)
	w.start(t, kubesource.Options{
		Clusters:         []kubesource.ClusterConfig{{ID: "alpha", Config: cfg}},
		EnableGatewayAPI: true, GatewayStatusDebounce: 20 * time.Millisecond,
	})
	installCRD(t, a.Config, gatewayCRD(t, "referencegrants"))

	kube := kubeClient(t, a.Config)
	createNamespace(t, kube, "shop")
	for _, name := range []string{"web", "backend"} {
		if _, err := kube.CoreV1().Services("shop").Create(ctx, service(name, ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dyn, err := dynamic.NewForConfig(a.Config)
	if err != nil {
		t.Fatal(err)
	}
	route := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
		"metadata": map[string]any{"name": "web", "namespace": "shop"},
		"spec": map[string]any{
			"parentRefs": []any{map[string]any{"group": "", "kind": "Service", "name": "web"}},
			"rules":      []any{map[string]any{"backendRefs": []any{map[string]any{"name": "backend", "port": int64(8080)}}}},
		},
	}}
	created, err := dyn.Resource(gvrHTTPRoute).Namespace("shop").Create(ctx, route, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The writer has read everything it reads once it wrote this.
	waitResolvedRefs(t, dyn, "True", string(gwv1.RouteReasonResolvedRefs), created.GetGeneration())

	for _, resource := range []string{"services", "namespaces", "httproutes", "grpcroutes", "gateways", "referencegrants"} {
		if n := counter.count(resource); n != 1 {
			t.Errorf("%d open watches of %s, want 1", n, resource)
		}
	}
}
