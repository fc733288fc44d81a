package kubesource_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
	"github.com/pilotwire/pilotwire/services/ingest/internal/ingesttest"
	"github.com/pilotwire/pilotwire/services/ingest/kubesource"
)

var names = bus.Names{Prefix: "pw"}

// testutil.DefaultTimeout bounds each wait of a test; cluster start-up has its own.

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	t.Cleanup(cancel)
	return ctx
}

// world is one embedded JetStream shared by the source runs of a test (a
// restart is a second run on the same stream).
type world struct {
	js   jetstream.JetStream
	reg  *prometheus.Registry
	logs *ingesttest.LogBuffer
}

func newWorld(t *testing.T) *world {
	t.Helper()
	_, js := natstest.Connect(t, natstest.Start(t))
	w := &world{js: js, reg: prometheus.NewRegistry(), logs: &ingesttest.LogBuffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("source logs:\n%s", w.logs)
		}
	})
	return w
}

// run is one running Source.
type run struct {
	src    *kubesource.Source
	ready  []kubesource.ClusterStatus
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// start runs a Source with o (publisher names, logs and metrics filled in)
// and waits until it is ready.
func (w *world) start(t *testing.T, o kubesource.Options) *run {
	t.Helper()
	o.Publish.Names = names
	o.Publish.RetryMin, o.Publish.RetryMax = 10*time.Millisecond, 200*time.Millisecond
	o.Publish.Stream.Memory = true
	o.Log = slog.New(slog.NewTextHandler(w.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	o.Registerer = w.reg
	src, err := kubesource.New(w.js, o)
	if err != nil {
		t.Fatalf("new source: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &run{src: src, cancel: cancel, done: make(chan error, 1)}
	readyc := make(chan []kubesource.ClusterStatus, 1)
	go func() { r.done <- src.Run(ctx, func(st []kubesource.ClusterStatus) { readyc <- st }) }()
	t.Cleanup(func() { r.stop(t) })
	deadline := time.NewTimer(testutil.DefaultTimeout)
	defer deadline.Stop()
	select {
	case r.ready = <-readyc:
	case err := <-r.done:
		t.Fatalf("source stopped before ready: %v", err)
	case <-deadline.C:
		t.Fatalf("source not ready within %s; status %+v", testutil.DefaultTimeout, src.Status())
	}
	return r
}

// stop ends the run and waits for it.
func (r *run) stop(t *testing.T) {
	r.once.Do(func() {
		r.cancel()
		if err := <-r.done; err != nil {
			t.Errorf("source Run: %v", err)
		}
	})
}

// status returns the status of cluster id, or false.
func (r *run) status(id string) (kubesource.ClusterStatus, bool) {
	for _, st := range r.src.Status() {
		if st.ID == id {
			return st, true
		}
	}
	return kubesource.ClusterStatus{}, false
}

func (w *world) records(t testing.TB) []ingesttest.Record {
	t.Helper()
	return ingesttest.Records(t, w.js, names)
}

// waitRecord polls the stream until a record matches, and returns it.
func (w *world) waitRecord(t *testing.T, what string, match func(ingesttest.Record) bool) ingesttest.Record {
	t.Helper()
	var found ingesttest.Record
	ingesttest.WaitFor(t, testCtx(t), what, func() (bool, string) {
		rs := w.records(t)
		for _, r := range rs {
			if match(r) {
				found = r
				return true, ""
			}
		}
		return false, strings.Join(ingesttest.Summaries(tail(rs, 10)), "; ")
	})
	return found
}

func tail[T any](s []T, n int) []T { return s[max(0, len(s)-n):] }

// is matches a record by op, cluster, kind, namespace and name.
func is(op pb.Op, cluster, kind, ns, name string) func(ingesttest.Record) bool {
	return func(r ingesttest.Record) bool {
		ref := r.Rec.GetRef()
		return r.Rec.GetOp() == op && r.Rec.GetCluster() == cluster && ref.GetKind() == kind &&
			ref.GetNamespace() == ns && ref.GetName() == name
	}
}

// barrier creates a Service and waits for its record. The worker handles
// its queue in order, so every event queued before the barrier's has been
// published (or found unchanged) by then: a "nothing else was published"
// check after a barrier is not a race.
func (w *world) barrier(t *testing.T, kube kubernetes.Interface, cluster, ns string) ingesttest.Record {
	t.Helper()
	name := fmt.Sprintf("barrier-%d", time.Now().UnixNano())
	if _, err := kube.CoreV1().Services(ns).Create(testCtx(t), service(name, ""), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create barrier: %v", err)
	}
	return w.waitRecord(t, "barrier "+name, is(pb.Op_OP_ADD, cluster, "Service", ns, name))
}

// metric reads a counter or gauge of the world's registry.
func (w *world) metric(t testing.TB, name string, labels map[string]string) float64 {
	t.Helper()
	return ingesttest.Metric(t, w.reg, name, labels)
}

func kubeClient(t *testing.T, cfg *rest.Config) kubernetes.Interface {
	t.Helper()
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return kube
}

func createNamespace(t *testing.T, kube kubernetes.Interface, name string) {
	t.Helper()
	if _, err := kube.CoreV1().Namespaces().Create(testCtx(t), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
}

func service(name, ip string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			ClusterIP: ip,
			Ports:     []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
}

func endpointSlice(name, svc string, addrs ...string) *discoveryv1.EndpointSlice {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To[int32](8080)}},
	}
	for _, a := range addrs {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
	}
	return es
}

// liveKeys lists the cluster's objects whose subject's last record is not
// a delete, as "Kind ns/name".
func liveKeys(rs []ingesttest.Record, cluster string) map[string]bool {
	last := make(map[string]ingesttest.Record)
	for _, r := range rs {
		if r.Rec.GetCluster() == cluster {
			last[r.Subject] = r
		}
	}
	out := make(map[string]bool)
	for _, r := range last {
		if r.Rec.GetOp() != pb.Op_OP_DELETE {
			ref := r.Rec.GetRef()
			out[ref.GetKind()+" "+ref.GetNamespace()+"/"+ref.GetName()] = true
		}
	}
	return out
}
