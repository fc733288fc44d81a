package kubesource_test

import (
	"testing"
	"time"

	"github.com/pilotwire/pilotwire/internal/testkit/k8stest"
	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
	"github.com/pilotwire/pilotwire/services/ingest/kubesource"
	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

// testStaleSecretCluster: a cluster whose multicluster Secret was removed
// while ingest was down has no owner left to delete its objects; at start,
// once the Secrets are listed, ingest deletes them. Clusters that did not
// come from a Secret (another ingest's, the file source's) are left alone.
func testStaleSecretCluster(t *testing.T, a *k8stest.Cluster) {
	w := newWorld(t)
	ctx := testCtx(t)
	seed := func(cluster, source string, objNames ...string) {
		t.Helper()
		p, err := publish.New(w.js, publish.Options{Cluster: cluster, Names: names, Stream: bus.StreamOptions{Memory: true}})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		var objs []publish.Object
		for _, n := range objNames {
			objs = append(objs, publish.Object{
				Key: publish.Key{Kind: "Service", Namespace: "mc", Name: n}, Version: "v1",
				JSON: []byte(`{"kind":"Service","metadata":{"name":"` + n + `"}}`), Source: source,
			})
		}
		if _, err := p.Sync(ctx, objs); err != nil {
			t.Fatal(err)
		}
	}
	seed("gone", "kube:secret stale-secrets/istio-remote-secret-gone", "a", "b")
	seed("files", "file:mesh.yaml#0", "c")
	seed("other", "kube:flag", "d")

	w.start(t, kubesource.Options{
		Clusters:        []kubesource.ClusterConfig{{ID: "alpha", Config: a.Config}},
		ConfigCluster:   "alpha",
		SecretNamespace: "stale-secrets",
		SyncTimeout:     10 * time.Second,
	})
	w.waitRecord(t, "gone's a deleted", is(pb.Op_OP_DELETE, "gone", "Service", "mc", "a"))
	w.waitRecord(t, "gone's b deleted", is(pb.Op_OP_DELETE, "gone", "Service", "mc", "b"))
	recs := w.records(t)
	if live := liveKeys(recs, "files"); !live["Service mc/c"] {
		t.Errorf("the file source's cluster was touched: %v", live)
	}
	if live := liveKeys(recs, "other"); !live["Service mc/d"] {
		t.Errorf("a cluster from a flag was touched: %v", live)
	}
}
