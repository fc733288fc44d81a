package kubesource_test

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/pilotwire/pilotwire/internal/testkit/k8stest"
	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
	"github.com/pilotwire/pilotwire/services/ingest/internal/ingesttest"
	"github.com/pilotwire/pilotwire/services/ingest/kubesource"
	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

var coreKinds = []string{
	"EndpointSlice.discovery.k8s.io/v1", "Namespace/v1", "Node/v1", "Pod/v1", "Service/v1",
}

// TestKubernetesSource runs the source against one real kube-apiserver (and
// a second one for the multi-cluster case). The subtests share the first
// cluster and run in order; each has its own JetStream and namespaces.
func TestKubernetesSource(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test against a real kube-apiserver")
	}
	a := k8stest.Start(t)
	waitBootstrapped(t, a)
	t.Run("core kinds flow with cluster, uid and resourceVersion", func(t *testing.T) { testCoreKinds(t, a) })
	t.Run("restart and relist publish nothing unchanged", func(t *testing.T) { testRestartAndRelist(t, a) })
	t.Run("a restart after status-only writes publishes nothing", func(t *testing.T) { testRestartAfterTrimmedWrites(t, a) })
	t.Run("CRD discovery starts and stops watches", func(t *testing.T) { testCRDDiscovery(t, a) })
	t.Run("a kind forbidden to list does not block the sync", func(t *testing.T) { testForbiddenKind(t, a) })
	t.Run("Gateway API gating", func(t *testing.T) { testGatewayAPIGating(t, a) })
	t.Run("many clusters", func(t *testing.T) { testManyClusters(t, a) })
	t.Run("a cluster whose Secret went while ingest was down is deleted", func(t *testing.T) { testStaleSecretCluster(t, a) })
}

func alpha(c *k8stest.Cluster) []kubesource.ClusterConfig {
	return []kubesource.ClusterConfig{{ID: "alpha", Config: c.Config}}
}

func testCoreKinds(t *testing.T, a *k8stest.Cluster) {
	kube := kubeClient(t, a.Config)
	ctx := testCtx(t)
	w := newWorld(t)
	createNamespace(t, kube, "core")
	r := w.start(t, kubesource.Options{
		Clusters: alpha(a),
		// Small enough for one oversized Service, big enough for the rest.
		Publish: publish.Options{Stream: bus.StreamOptions{MaxMsgSize: 64 << 10}},
	})
	if diff := cmp.Diff([]kubesource.State{kubesource.StateSynced}, states(r.ready)); diff != "" {
		t.Errorf("ready states (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(coreKinds, r.ready[0].Kinds); diff != "" {
		t.Errorf("watched kinds without CRDs (-want +got):\n%s", diff)
	}
	// The initial sync published what was there, e.g. the namespace.
	w.waitRecord(t, "namespace core", is(pb.Op_OP_ADD, "alpha", "Namespace", "", "core"))

	svc, err := kube.CoreV1().Services("core").Create(ctx, service("web", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec := w.waitRecord(t, "service added", is(pb.Op_OP_ADD, "alpha", "Service", "core", "web"))
	checkRecord(t, rec, "pw.changes.alpha.Service.core.web", "v1", string(svc.UID), svc.ResourceVersion)
	var gotSvc corev1.Service
	if err := json.Unmarshal(rec.Rec.GetObject(), &gotSvc); err != nil {
		t.Fatal(err)
	}
	if gotSvc.Kind != "Service" || gotSvc.APIVersion != "v1" || gotSvc.Spec.ClusterIP != svc.Spec.ClusterIP || len(gotSvc.ManagedFields) != 0 {
		t.Errorf("service object = %s", rec.Rec.GetObject())
	}

	es, err := kube.DiscoveryV1().EndpointSlices("core").Create(ctx, endpointSlice("web-1", "web", "10.244.0.5"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec = w.waitRecord(t, "slice added", is(pb.Op_OP_ADD, "alpha", "EndpointSlice", "core", "web-1"))
	checkRecord(t, rec, "pw.changes.alpha.EndpointSlice=2Ediscovery=2Ek8s=2Eio.core.web-1", "v1", string(es.UID), es.ResourceVersion)
	if rec.Rec.GetRef().GetGroup() != "discovery.k8s.io" {
		t.Errorf("slice group = %q", rec.Rec.GetRef().GetGroup())
	}

	es.Endpoints = append(es.Endpoints, endpointSlice("", "", "10.244.0.6").Endpoints...)
	es, err = kube.DiscoveryV1().EndpointSlices("core").Update(ctx, es, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec = w.waitRecord(t, "slice updated", is(pb.Op_OP_UPDATE, "alpha", "EndpointSlice", "core", "web-1"))
	checkRecord(t, rec, "pw.changes.alpha.EndpointSlice=2Ediscovery=2Ek8s=2Eio.core.web-1", "v1", string(es.UID), es.ResourceVersion)

	if err := kube.CoreV1().Services("core").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec = w.waitRecord(t, "service deleted", is(pb.Op_OP_DELETE, "alpha", "Service", "core", "web"))
	if rec.Rec.GetUid() != string(svc.UID) || len(rec.Rec.GetObject()) == 0 {
		t.Errorf("delete record: uid %q (want %q), object %d bytes", rec.Rec.GetUid(), svc.UID, len(rec.Rec.GetObject()))
	}
	if err := kube.DiscoveryV1().EndpointSlices("core").Delete(ctx, "web-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitRecord(t, "slice deleted", is(pb.Op_OP_DELETE, "alpha", "EndpointSlice", "core", "web-1"))

	t.Run("pods and nodes are trimmed", func(t *testing.T) { testTrimmed(t, w, kube) })
	t.Run("oversized object is rejected and counted", func(t *testing.T) { testOversized(t, w, kube) })

	for _, r := range w.records(t) {
		if r.Rec.GetCluster() != "alpha" || !strings.HasPrefix(r.Subject, "pw.changes.alpha.") {
			t.Errorf("record %s has cluster %q on %s", r.Summary(), r.Rec.GetCluster(), r.Subject)
		}
	}
}

func checkRecord(t *testing.T, r ingesttest.Record, subject, version, uid, rv string) {
	t.Helper()
	got := []string{r.Subject, r.Rec.GetRef().GetVersion(), r.Rec.GetUid(), r.Rec.GetResourceVersion(), r.Rec.GetCluster(), r.Rec.GetSource()}
	want := []string{subject, version, uid, rv, "alpha", "kube:flag"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("record %s: subject, version, uid, resourceVersion, cluster, source (-want +got):\n%s", r.Summary(), diff)
	}
}

func states(st []kubesource.ClusterStatus) []kubesource.State {
	var out []kubesource.State
	for _, s := range st {
		out = append(out, s.State)
	}
	return out
}

func testTrimmed(t *testing.T, w *world, kube kubernetes.Interface) {
	ctx := testCtx(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "app-0", Namespace: "core", Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{
				"sidecar.istio.io/inject":                          "true",
				"example.com/owner":                                "team-a",
				"kubectl.kubernetes.io/last-applied-configuration": `{"big":"json"}`,
			},
		},
		Spec: corev1.PodSpec{
			NodeName:           "node-1",
			ServiceAccountName: "web",
			Containers: []corev1.Container{{
				Name: "app", Image: "example.com/app:1", Env: []corev1.EnvVar{{Name: "A", Value: "b"}},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			}},
		},
	}
	if _, err := kube.CoreV1().Pods("core").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec := w.waitRecord(t, "pod added", is(pb.Op_OP_ADD, "alpha", "Pod", "core", "app-0"))
	var got corev1.Pod
	if err := json.Unmarshal(rec.Rec.GetObject(), &got); err != nil {
		t.Fatal(err)
	}
	want := corev1.PodSpec{
		NodeName:           "node-1",
		ServiceAccountName: "web",
		Containers:         []corev1.Container{{Name: "app", Ports: pod.Spec.Containers[0].Ports}},
	}
	if diff := cmp.Diff(want, got.Spec); diff != "" {
		t.Errorf("pod spec in the record (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"sidecar.istio.io/inject": "true"}, got.Annotations); diff != "" {
		t.Errorf("pod annotations in the record (-want +got):\n%s", diff)
	}
	if got.Kind != "Pod" || got.UID == "" || got.ResourceVersion != rec.Rec.GetResourceVersion() || len(got.ManagedFields) != 0 || got.Labels["app"] != "web" {
		t.Errorf("pod metadata in the record: %s", rec.Rec.GetObject())
	}

	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"topology.kubernetes.io/zone": "zone-a"}},
		Status: corev1.NodeStatus{
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
			Images:     []corev1.ContainerImage{{Names: []string{"example.com/app:1"}, SizeBytes: 1 << 20}},
		},
	}
	if _, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec = w.waitRecord(t, "node added", is(pb.Op_OP_ADD, "alpha", "Node", "", "node-1"))
	if rec.Subject != "pw.changes.alpha.Node._.node-1" {
		t.Errorf("node subject = %s", rec.Subject)
	}
	var gotNode corev1.Node
	if err := json.Unmarshal(rec.Rec.GetObject(), &gotNode); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(corev1.NodeStatus{Addresses: node.Status.Addresses}, gotNode.Status); diff != "" {
		t.Errorf("node status in the record (-want +got):\n%s", diff)
	}
	if gotNode.Labels["topology.kubernetes.io/zone"] != "zone-a" {
		t.Errorf("node labels in the record: %v", gotNode.Labels)
	}

	// A write that changes only what the record drops is not published.
	n, err := kube.CoreV1().Nodes().Get(ctx, "node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Conditions[0].Reason = "KubeletReady"
	if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	before := len(w.records(t))
	ingesttest.WaitFor(t, ctx, "node heartbeat counted as unchanged", func() (bool, string) {
		v := w.metric(t, "pilotwire_ingest_kube_events_total", map[string]string{"cluster": "alpha", "kind": "Node", "event": "unchanged"})
		return v >= 1, "none yet"
	})
	w.barrier(t, kube, "alpha", "core")
	if got := ingesttest.Summaries(w.records(t)[before:]); len(got) != 1 {
		t.Errorf("after a node status-only write and a barrier: new records %v, want only the barrier", got)
	}
}

func testOversized(t *testing.T, w *world, kube kubernetes.Interface) {
	ctx := testCtx(t)
	big := service("big", "")
	// Under the apiserver's 256 KiB annotation limit, over the stream's
	// 64 KiB record limit.
	big.Annotations = map[string]string{"example.com/blob": strings.Repeat("x", 100<<10)}
	if _, err := kube.CoreV1().Services("core").Create(ctx, big, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ingesttest.WaitFor(t, ctx, "too_large rejection", func() (bool, string) {
		v := w.metric(t, "pilotwire_ingest_rejected_records_total", map[string]string{"cluster": "alpha", "reason": publish.RejectTooLarge})
		return v >= 1, "not counted"
	})
	w.barrier(t, kube, "alpha", "core")
	for _, r := range w.records(t) {
		if r.Rec.GetRef().GetName() == "big" {
			t.Errorf("oversized service was published: %s", r.Summary())
		}
	}
	if !strings.Contains(w.logs.String(), "record exceeds the stream's max message size") {
		t.Errorf("no error log for the oversized service")
	}
}

func testRestartAndRelist(t *testing.T, a *k8stest.Cluster) {
	kube := kubeClient(t, a.Config)
	ctx := testCtx(t)
	w := newWorld(t)
	createNamespace(t, kube, "restart")
	for _, name := range []string{"keep", "gone"} {
		if _, err := kube.CoreV1().Services("restart").Create(ctx, service(name, ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	opts := kubesource.Options{Clusters: alpha(a)}
	r := w.start(t, opts)
	w.waitRecord(t, "service gone added", is(pb.Op_OP_ADD, "alpha", "Service", "restart", "gone"))
	w.barrier(t, kube, "alpha", "restart")
	r.stop(t)

	// Down: one service goes away.
	if err := kube.CoreV1().Services("restart").Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n := len(w.records(t))
	r = w.start(t, opts)
	// The initial sync is done when the source is ready.
	if diff := cmp.Diff([]string{"OP_DELETE Service restart/gone"}, ingesttest.Summaries(w.records(t)[n:])); diff != "" {
		t.Errorf("records of a restart (-want +got):\n%s", diff)
	}
	w.barrier(t, kube, "alpha", "restart")
	if got := ingesttest.Summaries(w.records(t)[n:]); len(got) != 2 {
		t.Errorf("records after the restart and a barrier: %v, want the delete and the barrier", got)
	}
	r.stop(t)

	// Nothing changed while down: a restart publishes nothing.
	n = len(w.records(t))
	w.start(t, opts) // stopped at the end of the test
	if got := ingesttest.Summaries(w.records(t)[n:]); len(got) != 0 {
		t.Errorf("a restart with nothing changed published %v", got)
	}

	// A relist: the apiserver restarts, so every watch breaks; client-go
	// lists again and replays every object as an update with the same
	// resourceVersion.
	n = len(w.records(t))
	relisted := func() float64 {
		return w.metric(t, "pilotwire_ingest_kube_events_total", map[string]string{"cluster": "alpha", "kind": "Service", "event": "unchanged"})
	}
	before := relisted()
	a.StopAPIServer()
	a.RestartAPIServer(t)
	ingesttest.WaitFor(t, ctx, "the Service informer to relist", func() (bool, string) {
		v := relisted()
		return v > before, "unchanged Service events: " + strconv.FormatFloat(v, 'f', -1, 64)
	})
	w.barrier(t, kube, "alpha", "restart")
	if got := ingesttest.Summaries(w.records(t)[n:]); len(got) != 1 {
		t.Errorf("records after a relist and a barrier: %v, want only the barrier", got)
	}
}

// testRestartAfterTrimmedWrites: a Pod and a Node written while ingest is
// down only in fields the record drops (status) have a new resourceVersion
// but the same record: the restart publishes nothing for them. A label
// change afterwards is still published.
func testRestartAfterTrimmedWrites(t *testing.T, a *k8stest.Cluster) {
	kube := kubeClient(t, a.Config)
	ctx := testCtx(t)
	w := newWorld(t)
	createNamespace(t, kube, "trimrestart")
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app-0", Namespace: "trimrestart", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "example.com/app:1"}}},
	}
	if _, err := kube.CoreV1().Pods("trimrestart").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "trimrestart-node"},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	if _, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.CoreV1().Nodes().Delete(testCtx(t), node.Name, metav1.DeleteOptions{}) })
	opts := kubesource.Options{Clusters: alpha(a)}
	r := w.start(t, opts)
	podRec := w.waitRecord(t, "pod added", is(pb.Op_OP_ADD, "alpha", "Pod", "trimrestart", "app-0"))
	w.waitRecord(t, "node added", is(pb.Op_OP_ADD, "alpha", "Node", "", node.Name))
	r.stop(t)

	// Down: status-only writes.
	p, err := kube.CoreV1().Pods("trimrestart").Get(ctx, "app-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Image: "example.com/app:1", RestartCount: 3}}
	p, err = kube.CoreV1().Pods("trimrestart").UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.ResourceVersion == podRec.Rec.GetResourceVersion() {
		t.Fatalf("pod status write kept resourceVersion %s", p.ResourceVersion)
	}
	nd, err := kube.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nd.Status.Conditions[0].Reason = "KubeletReady"
	if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, nd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	n := len(w.records(t))
	w.start(t, opts) // stopped at the end of the test
	w.barrier(t, kube, "alpha", "trimrestart")
	if got := ingesttest.Summaries(w.records(t)[n:]); len(got) != 1 {
		t.Errorf("records after a restart over status-only writes and a barrier: %v, want only the barrier", got)
	}

	// A kept field still counts.
	p.Labels["app"] = "web2"
	if _, err := kube.CoreV1().Pods("trimrestart").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	isUpdate := is(pb.Op_OP_UPDATE, "alpha", "Pod", "trimrestart", "app-0")
	rec := w.waitRecord(t, "pod label update", func(r ingesttest.Record) bool {
		return isUpdate(r) && strings.Contains(string(r.Rec.GetObject()), `"web2"`)
	})
	var got corev1.Pod
	if err := json.Unmarshal(rec.Rec.GetObject(), &got); err != nil {
		t.Fatal(err)
	}
	if got.Labels["app"] != "web2" || got.ResourceVersion != rec.Rec.GetResourceVersion() {
		t.Errorf("pod update record: labels %v, object rv %s, record rv %s", got.Labels, got.ResourceVersion, rec.Rec.GetResourceVersion())
	}
}

// testForbiddenKind: the source's user may list everything but
// DestinationRules. The cluster syncs anyway, reports the kind, and keeps
// the DestinationRule recorded before; once granted, the kind is followed.
func testForbiddenKind(t *testing.T, a *k8stest.Cluster) {
	kube := kubeClient(t, a.Config)
	dyn := dynClient(t, a.Config)
	ctx := testCtx(t)
	w := newWorld(t)
	createNamespace(t, kube, "rbac")
	crd := istioCRD(t, "DestinationRule")
	installCRD(t, a.Config, crd)
	t.Cleanup(func() { deleteCRD(t, a.Config, crd.Name) })
	drGVR := schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "destinationrules"}
	dr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1", "kind": "DestinationRule",
		"metadata": map[string]any{"name": "reviews", "namespace": "rbac"},
		"spec":     map[string]any{"host": "reviews"},
	}}
	if _, err := dyn.Resource(drGVR).Namespace("rbac").Create(ctx, dr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r := w.start(t, kubesource.Options{Clusters: alpha(a)})
	w.waitRecord(t, "destination rule added", is(pb.Op_OP_ADD, "alpha", "DestinationRule", "rbac", "reviews"))
	r.stop(t)

	// A user that may read everything the source watches but DestinationRules.
	rules := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"services", "pods", "nodes", "namespaces"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"apiextensions.k8s.io"}, Resources: []string{"customresourcedefinitions"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"networking.istio.io"}, Resources: []string{"virtualservices", "gateways", "serviceentries", "sidecars", "workloadentries", "workloadgroups"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{"security.istio.io", "telemetry.istio.io", "extensions.istio.io", "gateway.networking.k8s.io"}, Resources: []string{"*"}, Verbs: []string{"get", "list", "watch"}},
	}
	role, err := kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "pilotwire-limited"}, Rules: rules}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.RbacV1().ClusterRoles().Delete(testCtx(t), role.Name, metav1.DeleteOptions{}) })
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "pilotwire-limited"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "pilotwire-limited"}},
	}
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoleBindings().Delete(testCtx(t), binding.Name, metav1.DeleteOptions{})
	})
	limited := rest.CopyConfig(a.Config)
	limited.Impersonate = rest.ImpersonationConfig{UserName: "pilotwire-limited"}

	n := len(w.records(t))
	r = w.start(t, kubesource.Options{Clusters: []kubesource.ClusterConfig{{ID: "alpha", Config: limited}}})
	const drKind = "DestinationRule.networking.istio.io/v1"
	if got := states(r.ready); len(got) != 1 || got[0] != kubesource.StateSynced {
		t.Fatalf("cluster states at ready: %v, want synced (status %+v)", got, r.ready)
	}
	if !slices.Contains(r.ready[0].ForbiddenKinds, drKind) {
		t.Errorf("forbidden kinds at ready: %v, want %s", r.ready[0].ForbiddenKinds, drKind)
	}
	if v := w.metric(t, "pilotwire_ingest_kube_forbidden_kinds", map[string]string{"cluster": "alpha", "kind": "DestinationRule.networking.istio.io"}); v != 1 {
		t.Errorf("pilotwire_ingest_kube_forbidden_kinds = %v, want 1", v)
	}
	w.barrier(t, kube, "alpha", "rbac")
	if got := ingesttest.Summaries(w.records(t)[n:]); len(got) != 1 {
		t.Errorf("records after a sync without DestinationRules and a barrier: %v, want only the barrier", got)
	}

	// Granted: the kind lists (client-go retries) and is followed.
	role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{"networking.istio.io"}, Resources: []string{"destinationrules"}, Verbs: []string{"get", "list", "watch"}})
	if _, err := kube.RbacV1().ClusterRoles().Update(ctx, role, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ingesttest.WaitFor(t, ctx, "the DestinationRule kind to list", func() (bool, string) {
		st, _ := r.status("alpha")
		return len(st.ForbiddenKinds) == 0, fmt.Sprint("forbidden kinds: ", st.ForbiddenKinds)
	})
	if err := dyn.Resource(drGVR).Namespace("rbac").Delete(ctx, "reviews", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitRecord(t, "destination rule deleted", is(pb.Op_OP_DELETE, "alpha", "DestinationRule", "rbac", "reviews"))
}

func testCRDDiscovery(t *testing.T, a *k8stest.Cluster) {
	kube := kubeClient(t, a.Config)
	dyn := dynClient(t, a.Config)
	ctx := testCtx(t)
	w := newWorld(t)
	createNamespace(t, kube, "crd")
	// No Istio CRD is installed: ready anyway.
	r := w.start(t, kubesource.Options{Clusters: alpha(a), EnableGatewayAPI: true})
	if slices.ContainsFunc(r.ready[0].Kinds, func(k string) bool { return strings.Contains(k, "istio.io") }) {
		t.Fatalf("watching Istio kinds without their CRDs: %v", r.ready[0].Kinds)
	}

	crd := istioCRD(t, "VirtualService")
	installCRD(t, a.Config, crd)
	const vsKind = "VirtualService.networking.istio.io/v1"
	waitKinds(t, r, "alpha", func(kinds []string) bool { return slices.Contains(kinds, vsKind) })

	vs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "networking.istio.io/v1",
		"kind":       "VirtualService",
		"metadata":   map[string]any{"name": "reviews", "namespace": "crd"},
		"spec": map[string]any{
			"hosts": []any{"reviews"},
			"http":  []any{map[string]any{"route": []any{map[string]any{"destination": map[string]any{"host": "reviews"}}}}},
		},
	}}
	vsGVR := schema.GroupVersionResource{Group: "networking.istio.io", Version: "v1", Resource: "virtualservices"}
	created, err := dyn.Resource(vsGVR).Namespace("crd").Create(ctx, vs, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rec := w.waitRecord(t, "virtual service added", is(pb.Op_OP_ADD, "alpha", "VirtualService", "crd", "reviews"))
	checkRecord(t, rec, "pw.changes.alpha.VirtualService=2Enetworking=2Eistio=2Eio.crd.reviews", "v1", string(created.GetUID()), created.GetResourceVersion())

	deleteCRD(t, a.Config, crd.Name)
	w.waitRecord(t, "virtual service deleted with its CRD", is(pb.Op_OP_DELETE, "alpha", "VirtualService", "crd", "reviews"))
	waitKinds(t, r, "alpha", func(kinds []string) bool { return !slices.Contains(kinds, vsKind) })
	if v := w.metric(t, "pilotwire_ingest_kube_watched_kinds", map[string]string{"cluster": "alpha"}); v != float64(len(coreKinds)) {
		t.Errorf("watched kinds gauge = %v after the CRD is gone, want %d", v, len(coreKinds))
	}
}

func testGatewayAPIGating(t *testing.T, a *k8stest.Cluster) {
	kube := kubeClient(t, a.Config)
	dyn := dynClient(t, a.Config)
	ctx := testCtx(t)
	for _, plural := range []string{"gatewayclasses", "gateways", "httproutes"} {
		installCRD(t, a.Config, gatewayCRD(t, plural))
	}
	createNamespace(t, kube, "gw")
	route := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1",
		"kind":       "HTTPRoute",
		"metadata":   map[string]any{"name": "route", "namespace": "gw"},
		"spec":       map[string]any{"parentRefs": []any{map[string]any{"name": "gateway"}}},
	}}
	routeGVR := schema.GroupVersionResource{Group: kubesource.GroupGatewayAPI, Version: "v1", Resource: "httproutes"}
	if _, err := dyn.Resource(routeGVR).Namespace("gw").Create(ctx, route, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	isGatewayAPI := func(k string) bool { return strings.Contains(k, "."+kubesource.GroupGatewayAPI+"/") }

	w := newWorld(t)
	r := w.start(t, kubesource.Options{Clusters: alpha(a), EnableGatewayAPI: false})
	if got := slices.DeleteFunc(slices.Clone(r.ready[0].Kinds), func(k string) bool { return !isGatewayAPI(k) }); len(got) != 0 {
		t.Errorf("Gateway API disabled, but watching %v", got)
	}
	// The initial sync is complete at ready: a watched route would be there.
	for _, rec := range w.records(t) {
		if rec.Rec.GetRef().GetGroup() == kubesource.GroupGatewayAPI {
			t.Errorf("Gateway API disabled, but published %s", rec.Summary())
		}
	}
	r.stop(t)

	r = w.start(t, kubesource.Options{Clusters: alpha(a), EnableGatewayAPI: true})
	var got []string
	for _, k := range r.ready[0].Kinds {
		if isGatewayAPI(k) {
			got = append(got, k)
		}
	}
	want := []string{"Gateway.gateway.networking.k8s.io/v1", "GatewayClass.gateway.networking.k8s.io/v1", "HTTPRoute.gateway.networking.k8s.io/v1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Gateway API enabled: watched kinds (-want +got):\n%s", diff)
	}
	w.waitRecord(t, "route published once enabled", is(pb.Op_OP_ADD, "alpha", "HTTPRoute", "gw", "route"))
}

func testManyClusters(t *testing.T, a *k8stest.Cluster) {
	b := k8stest.Start(t)
	waitBootstrapped(t, b)
	kubeA, kubeB := kubeClient(t, a.Config), kubeClient(t, b.Config)
	ctx := testCtx(t)
	for _, kube := range []kubernetes.Interface{kubeA, kubeB} {
		createNamespace(t, kube, "mc")
		if _, err := kube.CoreV1().Services("mc").Create(ctx, service("shared", ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createNamespace(t, kubeA, kubesource.DefaultSecretNamespace)

	dead, err := kubesource.LoadKubeconfig(k8stest.DeadKubeconfig(t))
	if err != nil {
		t.Fatal(err)
	}
	w := newWorld(t)
	r := w.start(t, kubesource.Options{
		Clusters:      []kubesource.ClusterConfig{{ID: "alpha", Config: a.Config}, {ID: "dead", Config: dead}},
		ConfigCluster: "alpha",
		SyncTimeout:   2 * time.Second,
	})
	// The dead cluster is reported and does not hold up readiness.
	if diff := cmp.Diff([]kubesource.State{kubesource.StateSynced, kubesource.StateTimedOut}, states(r.ready)); diff != "" {
		t.Errorf("ready states of alpha, dead (-want +got):\n%s", diff)
	}
	if v := w.metric(t, "pilotwire_ingest_kube_cluster_sync_timeouts_total", map[string]string{"cluster": "dead"}); v != 1 {
		t.Errorf("sync timeouts of dead = %v, want 1", v)
	}
	if st, _ := r.status("dead"); st.LastError == "" {
		t.Errorf("dead cluster reports no error: %+v", st)
	}
	w.waitRecord(t, "alpha's service", is(pb.Op_OP_ADD, "alpha", "Service", "mc", "shared"))

	// Istio's way: a Secret in the config cluster adds a cluster live. A
	// kubeconfig that would run a program is refused.
	kcB, err := os.ReadFile(b.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: "istio-remote-secret-beta", Namespace: kubesource.DefaultSecretNamespace,
			Labels: map[string]string{kubesource.MultiClusterSecretLabel: "true"},
		},
		Data: map[string][]byte{"beta": kcB, "evil": []byte(execKubeconfig)},
	}
	if _, err := kubeA.CoreV1().Secrets(secret.Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec := w.waitRecord(t, "beta's service", is(pb.Op_OP_ADD, "beta", "Service", "mc", "shared"))
	if rec.Subject != "pw.changes.beta.Service.mc.shared" || rec.Rec.GetSource() != "kube:secret istio-system/istio-remote-secret-beta" {
		t.Errorf("beta's record on %s from %q", rec.Subject, rec.Rec.GetSource())
	}
	ingesttest.WaitFor(t, ctx, "beta synced", func() (bool, string) {
		st, ok := r.status("beta")
		return ok && st.State == kubesource.StateSynced, string(st.State)
	})
	if st, _ := r.status("beta"); !cmp.Equal(coreKinds, st.Kinds) {
		t.Errorf("a cluster from a Secret watches %v, want the core kinds only (Istio reads config from the config cluster)", st.Kinds)
	}
	if _, ok := r.status("evil"); ok || w.metric(t, "pilotwire_ingest_kube_errors_total", map[string]string{"cluster": "evil", "reason": "kubeconfig"}) != 1 {
		t.Errorf("a kubeconfig with an exec plugin was not refused")
	}

	// Removing the Secret stops beta and deletes its objects.
	if err := kubeA.CoreV1().Secrets(secret.Namespace).Delete(ctx, secret.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitRecord(t, "beta's service deleted", is(pb.Op_OP_DELETE, "beta", "Service", "mc", "shared"))
	if _, ok := r.status("beta"); ok {
		t.Errorf("beta still running after its Secret was deleted")
	}
	if live := liveKeys(w.records(t), "beta"); len(live) != 0 {
		t.Errorf("beta objects still live on the stream: %v", live)
	}
	if _, err := kubeB.CoreV1().Services("mc").Create(ctx, service("after", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.barrier(t, kubeA, "alpha", "mc")
	for _, rec := range w.records(t) {
		if rec.Rec.GetCluster() == "beta" && rec.Rec.GetRef().GetName() == "after" {
			t.Errorf("a removed cluster was still watched: %s", rec.Summary())
		}
	}
	if !liveKeys(w.records(t), "alpha")["Service mc/shared"] {
		t.Errorf("alpha's service is not live any more")
	}
}

// execKubeconfig would make ingest run a program: refused from a Secret.
const execKubeconfig = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/true, interactiveMode: Never}}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`

// waitBootstrapped waits for the objects a new apiserver creates of its own
// accord (system namespaces, the kubernetes Service), so that a test that
// counts records does not see them arrive late.
func waitBootstrapped(t *testing.T, c *k8stest.Cluster) {
	t.Helper()
	kube := kubeClient(t, c.Config)
	ctx := testCtx(t)
	ingesttest.WaitFor(t, ctx, "apiserver bootstrap objects", func() (bool, string) {
		for _, ns := range []string{"kube-system", "kube-public", "kube-node-lease"} {
			if _, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
				return false, err.Error()
			}
		}
		if _, err := kube.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{}); err != nil {
			return false, err.Error()
		}
		return true, ""
	})
}

func waitKinds(t *testing.T, r *run, id string, cond func([]string) bool) {
	t.Helper()
	ingesttest.WaitFor(t, testCtx(t), "watched kinds of "+id, func() (bool, string) {
		st, _ := r.status(id)
		return cond(st.Kinds), strings.Join(st.Kinds, ", ")
	})
}

func dynClient(t *testing.T, cfg *rest.Config) dynamic.Interface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return dyn
}
