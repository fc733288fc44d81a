package ingest_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/pilotwire/pilotwire/internal/testkit/k8stest"
	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/svc"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
	"github.com/pilotwire/pilotwire/services/ingest"
	"github.com/pilotwire/pilotwire/services/ingest/internal/ingesttest"
	"github.com/pilotwire/pilotwire/services/ingest/kubesource"
	"github.com/pilotwire/pilotwire/services/ingest/manifest"
)

// secretValue is in every Secret of the test; no record may carry it.
const secretValue = "hunter2-do-not-record"

const secretManifests = `apiVersion: v1
kind: Secret
metadata:
  name: db-password
  namespace: bookinfo
stringData:
  password: ` + secretValue + `
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: bookinfo
data:
  note: not a kind the mesh reads
`

// seedSecret stores a Secret record as an older ingest (one without the
// allowlist) did, so that the stream holds one before ingest starts.
func seedSecret(t *testing.T, js jetstream.JetStream, names bus.Names, cluster, name string) {
	t.Helper()
	ctx := ingesttest.Ctx(t)
	if _, err := bus.EnsureStream(ctx, js, names.ChangesConfig(bus.StreamOptions{})); err != nil {
		t.Fatal(err)
	}
	ref := &pb.ObjectRef{Version: "v1", Kind: "Secret", Namespace: "bookinfo", Name: name}
	rec := &pb.ChangeRecord{
		Cluster: cluster, Ref: ref, Op: pb.Op_OP_ADD, Uid: "uid-" + name, ResourceVersion: "1",
		ObservedAt: timestamppb.Now(), Source: "seeded by the test",
		Object: []byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"` + name + `","namespace":"bookinfo"},"data":{"password":"` + secretValue + `"}}`),
	}
	data, err := proto.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, names.ChangeSubject(cluster, ref), data); err != nil {
		t.Fatal(err)
	}
}

// TestSecretsAreNeverRecorded: ingest records only the kinds on its
// allowlist. A Secret (or any kind off the list) in the config dir or in
// a cluster is not recorded, and the Secret records an older ingest left
// on the stream are purged at start (not deleted: a delete would carry
// the last content), logged and counted.
func TestSecretsAreNeverRecorded(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test against a real kube-apiserver")
	}
	c := k8stest.Start(t)
	url := natstest.Start(t)
	_, js := natstest.Connect(t, url)
	names := bus.Names{Prefix: "pw"}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bookinfo.yaml"), []byte(manifests+"---\n"+secretManifests), 0o644); err != nil {
		t.Fatal(err)
	}
	seedSecret(t, js, names, "files", "old-token")
	seedSecret(t, js, names, "kube", "old-token")

	kube, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*ingesttest.Timeout)
	defer cancel()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bookinfo"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Secrets("bookinfo").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "api-key"},
		StringData: map[string]string{"key": secretValue},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	cfg := ingest.DefaultConfig()
	cfg.ConfigDir, cfg.FileClusterID = dir, "files"
	cfg.Kubeconfig, cfg.ClusterID = c.Kubeconfig, "kube"
	logs := &ingesttest.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil)).With("component", "ingest")
	health := &svc.Health{}
	reg := prometheus.NewRegistry()
	done := make(chan error, 1)
	go func() { done <- ingest.Run(ctx, cfg, svc.Deps{JS: js, Log: log, Reg: reg, Health: health}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	ingesttest.WaitFor(t, ctx, "ready", func() (bool, string) { return health.Ready(), logs.String() })
	// The kube cluster's Namespace is recorded once it is synced.
	ingesttest.WaitFor(t, ctx, "the kube cluster's Namespace", func() (bool, string) {
		got := ingesttest.Summaries(ingesttest.Records(t, js, names))
		return strings.Contains(strings.Join(got, "; "), "OP_ADD Namespace /bookinfo"), strings.Join(got, "; ")
	})

	for _, r := range ingesttest.Records(t, js, names) {
		if k := r.Rec.GetRef().GetKind(); k == "Secret" || k == "ConfigMap" {
			t.Errorf("record %d %s on %s: a kind off the allowlist was recorded", r.Seq, r.Summary(), r.Subject)
		}
		if strings.Contains(string(r.Rec.GetObject()), secretValue) {
			t.Errorf("record %d %s carries the Secret's value", r.Seq, r.Summary())
		}
	}
	for _, cluster := range []string{"files", "kube"} {
		if got := ingesttest.Metric(t, reg, "pilotwire_ingest_purged_subjects_total", map[string]string{"cluster": cluster, "kind": "Secret"}); got != 1 {
			t.Errorf("purged_subjects_total{cluster=%s,kind=Secret} = %v, want 1", cluster, got)
		}
	}
	if !strings.Contains(logs.String(), "purged the records of kinds ingest does not record") {
		t.Errorf("no log line for the purge:\n%s", logs)
	}
	if got := ingesttest.Metric(t, reg, "pilotwire_ingest_rejected_records_total", map[string]string{"reason": "kind_not_recorded"}); got < 2 {
		t.Errorf("rejected_records_total{kind_not_recorded} = %v, want at least 2 (the dir's Secret and ConfigMap)", got)
	}
}

// TestAllowlistCoversWatchedKinds: every kind the Kubernetes source
// watches is on the allowlist (else it would watch what it never records).
func TestAllowlistCoversWatchedKinds(t *testing.T) {
	for _, gvk := range kubesource.CoreKinds {
		if !manifest.Recorded(gvk.Group, gvk.Kind) {
			t.Errorf("core kind %s is watched but not recorded", gvk.GroupKind())
		}
	}
	for _, gk := range append(append([]schema.GroupKind(nil), kubesource.IstioKinds...), kubesource.GatewayAPIKinds...) {
		if !manifest.Recorded(gk.Group, gk.Kind) {
			t.Errorf("kind %s is watched but not recorded", gk)
		}
	}
	for _, gk := range []schema.GroupKind{{Kind: "Secret"}, {Kind: "ConfigMap"}, {Group: "apps", Kind: "Deployment"}} {
		if manifest.Recorded(gk.Group, gk.Kind) {
			t.Errorf("kind %s is recorded", gk)
		}
	}
}
