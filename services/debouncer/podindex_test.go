package debouncer

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// publishObject writes one change record of obj and waits for its ack.
func publishObject(ctx context.Context, t *testing.T, js jetstream.JetStream, ref *pb.ObjectRef, op pb.Op, obj any) uint64 {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	data, err := proto.Marshal(&pb.ChangeRecord{Cluster: "c1", Ref: ref, Op: op, Object: b})
	if err != nil {
		t.Fatal(err)
	}
	ack, err := js.Publish(ctx, names.ChangeSubject("c1", ref), data)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

func serviceSlice(svc, name string, pods ...string) map[string]any {
	var eps []any
	for _, p := range pods {
		eps = append(eps, map[string]any{"addresses": []string{"10.0.0.1"}, "targetRef": map[string]any{"kind": "Pod", "name": p}})
	}
	return map[string]any{
		"metadata":  map[string]any{"name": name, "namespace": "ns", "labels": map[string]any{"kubernetes.io/service-name": svc}},
		"endpoints": eps,
	}
}

func podObject(name, version string) map[string]any {
	return map[string]any{"metadata": map[string]any{"name": name, "namespace": "ns", "labels": map[string]any{"version": version}}}
}

// requestCovering waits for the PushRequest that covers seq.
func requestCovering(t *testing.T, js jetstream.JetStream, seq uint64) *pb.PushRequest {
	t.Helper()
	var found *pb.PushRequest
	testutil.Eventually(t, "a push request covering the change", func() bool {
		for _, pr := range pushRequests(t, js) {
			if covers(pr.GetCovered(), seq) {
				found = pr
				return true
			}
		}
		return false
	})
	return found
}

func hasServiceKey(pr *pb.PushRequest, ns, name string) bool {
	return slices.ContainsFunc(pr.GetConfigKeys(), func(k *pb.ConfigKey) bool {
		return k.GetKind() == "Service" && k.GetNamespace() == ns && k.GetName() == name && k.GetCluster() == "c1"
	})
}

// TestPodLabelChangeAfterRestart: the pod → service index survives a
// restart of the debouncer. The first label change of a pod after the
// restart must still be an endpoint push of the services whose slices name
// the pod (they moved it between subsets), also when the slice was
// published long before the restart and never changed since. A slice
// changed after the floor the new instance resumes from is replayed, not
// read twice.
func TestPodLabelChangeAfterRestart(t *testing.T) {
	url, js, dcfg, a := activeDebouncer(t, 10*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()

	sliceRef := func(name string) *pb.ObjectRef {
		return &pb.ObjectRef{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice", Namespace: "ns", Name: name}
	}
	podRef := func(name string) *pb.ObjectRef {
		return &pb.ObjectRef{Version: "v1", Kind: "Pod", Namespace: "ns", Name: name}
	}
	publishObject(ctx, t, js, sliceRef("web-a"), pb.Op_OP_ADD, serviceSlice("web", "web-a", "web-1"))
	publishObject(ctx, t, js, podRef("web-1"), pb.Op_OP_ADD, podObject("web-1", "v1"))
	publishObject(ctx, t, js, sliceRef("gone"), pb.Op_OP_ADD, serviceSlice("web", "gone", "web-3"))
	last := publishObject(ctx, t, js, sliceRef("gone"), pb.Op_OP_DELETE, serviceSlice("web", "gone", "web-3"))
	requestCovering(t, js, last)
	if err := a.stop(); err != nil {
		t.Fatalf("a: %v", err)
	}

	// Published while no debouncer runs: above the floor, replayed.
	replayed := publishObject(ctx, t, js, sliceRef("api-a"), pb.Op_OP_ADD, serviceSlice("api", "api-a", "api-1"))
	b := startDebouncer(t, url, "b", dcfg)
	testutil.Eventually(t, "b active", b.leader)
	requestCovering(t, js, replayed) // the pod changes below come apart from it

	seq := publishObject(ctx, t, js, podRef("web-1"), pb.Op_OP_UPDATE, podObject("web-1", "v2"))
	if pr := requestCovering(t, js, seq); !hasServiceKey(pr, "ns", "web") || pr.GetReasons()[ReasonEndpoint] == 0 {
		t.Errorf("pod web-1 label change after the restart: keys %v reasons %v, want the Service ns/web and reason endpoint",
			pr.GetConfigKeys(), pr.GetReasons())
	}
	seq = publishObject(ctx, t, js, podRef("api-1"), pb.Op_OP_UPDATE, podObject("api-1", "v2"))
	if pr := requestCovering(t, js, seq); !hasServiceKey(pr, "ns", "api") {
		t.Errorf("pod api-1 (its slice replayed after the restart): keys %v, want the Service ns/api", pr.GetConfigKeys())
	}
	seq = publishObject(ctx, t, js, podRef("web-3"), pb.Op_OP_UPDATE, podObject("web-3", "v2"))
	if pr := requestCovering(t, js, seq); hasServiceKey(pr, "ns", "web") {
		t.Errorf("pod web-3 (its slice deleted before the restart): keys %v, want no service", pr.GetConfigKeys())
	}
	if got := testutil.Metric(b.reg, "pilotwire_debounce_index_rebuild_slices"); got != 1 {
		t.Errorf("slices read into the index at start: %v, want 1 (web-a; api-a is replayed, gone is deleted)", got)
	}
}

// TestIndexRebuildIsBounded: a rebuild stops after --index-rebuild-max
// records, says so (metric), and the term runs on with what it read.
func TestIndexRebuildIsBounded(t *testing.T) {
	url, js, dcfg, a := activeDebouncer(t, 10*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	ref := func(name string) *pb.ObjectRef {
		return &pb.ObjectRef{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice", Namespace: "ns", Name: name}
	}
	var last uint64
	for _, name := range []string{"web-a", "web-b", "web-c"} {
		last = publishObject(ctx, t, js, ref(name), pb.Op_OP_ADD, serviceSlice("web", name, name+"-pod"))
	}
	requestCovering(t, js, last)
	if err := a.stop(); err != nil {
		t.Fatalf("a: %v", err)
	}
	b := startWith(t, url, "b", func(c *Config) { c.Debounce = dcfg; c.IndexRebuildMax = 2 })
	testutil.Eventually(t, "b active", b.leader)
	testutil.Eventually(t, "the truncated rebuild counted", func() bool {
		return testutil.Metric(b.reg, "pilotwire_debounce_index_rebuild_truncated_total") == 1
	})
	if got := testutil.Metric(b.reg, "pilotwire_debounce_index_rebuild_slices"); got != 2 {
		t.Errorf("slices read: %v, want 2 (the bound)", got)
	}
	// The term runs: a change still becomes a request.
	seq := publishObject(ctx, t, js, &pb.ObjectRef{Version: "v1", Kind: "Pod", Namespace: "ns", Name: "web-a-pod"}, pb.Op_OP_UPDATE, podObject("web-a-pod", "v2"))
	requestCovering(t, js, seq)
}
