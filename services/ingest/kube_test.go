package ingest_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/pilotwire/pilotwire/internal/testkit/k8stest"
	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/svc"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
	"github.com/pilotwire/pilotwire/services/ingest"
	"github.com/pilotwire/pilotwire/services/ingest/internal/ingesttest"
	"github.com/pilotwire/pilotwire/services/ingest/kubesource"
)

// TestRunFilesAndClusters runs the service with both sources, configured
// by flags: a config dir (cluster "files"), a live cluster (--kubeconfig,
// cluster "kube") and a cluster that cannot be reached (--cluster), which
// is reported and does not hold up readiness.
func TestRunFilesAndClusters(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test against a real kube-apiserver")
	}
	c := k8stest.Start(t)
	url := natstest.Start(t)
	_, js := natstest.Connect(t, url)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bookinfo.yaml"), []byte(manifests), 0o644); err != nil {
		t.Fatal(err)
	}
	dead := k8stest.DeadKubeconfig(t)

	var cfg ingest.Config
	fs := pflag.NewFlagSet("ingest", pflag.ContinueOnError)
	cfg.AddFlags(fs)
	err := fs.Parse([]string{
		"--config-dir", dir, "--file-cluster-id", "files", "--file-debounce", "20ms",
		"--kubeconfig", c.Kubeconfig, "--cluster-id", "kube",
		"--cluster", "dead=" + dead, "--cluster-sync-timeout", "2s",
	})
	if err != nil {
		t.Fatal(err)
	}

	srv := svc.NewHTTPServer("127.0.0.1:0", prometheus.NewRegistry(), &svc.Health{}, slog.New(slog.DiscardHandler))
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	logs := &ingesttest.LogBuffer{}
	log := slog.New(slog.NewTextHandler(logs, nil)).With("component", "ingest")
	health := &svc.Health{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*ingesttest.Timeout)
	defer cancel()
	done := make(chan error, 2)
	go func() { done <- srv.Serve(ctx) }()
	go func() {
		done <- ingest.Run(ctx, cfg, svc.Deps{JS: js, Log: log, Reg: prometheus.NewRegistry(), Health: health, HTTP: srv, Debug: srv})
	}()
	defer func() {
		cancel()
		for range 2 {
			if err := <-done; err != nil {
				t.Errorf("stopped with: %v", err)
			}
		}
	}()
	ingesttest.WaitFor(t, ctx, "ready", func() (bool, string) { return health.Ready(), logs.String() })

	kube, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bookinfo"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().Services("bookinfo").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "reviews"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 9080}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	names := bus.Names{Prefix: "pw"}
	ingesttest.WaitFor(t, ctx, "one reviews Service per cluster", func() (bool, string) {
		var got []string
		for _, r := range ingesttest.Records(t, js, names) {
			if r.Rec.GetOp() == pb.Op_OP_ADD && r.Rec.GetRef().GetKind() == "Service" && r.Rec.GetRef().GetName() == "reviews" {
				got = append(got, r.Subject)
			}
		}
		return cmp.Equal([]string{"pw.changes.files.Service.bookinfo.reviews", "pw.changes.kube.Service.bookinfo.reviews"}, got), strings.Join(got, ", ")
	})

	resp, err := http.Get("http://" + srv.Addr() + "/debug/clusterz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st []kubesource.ClusterStatus
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, s := range st {
		got = append(got, s.ID+" "+string(s.State))
	}
	if diff := cmp.Diff([]string{"dead timed_out", "kube synced"}, got); diff != "" {
		t.Errorf("/debug/clusterz (-want +got):\n%s", diff)
	}
	if !strings.Contains(logs.String(), `msg="ingest ready" component=ingest cluster=kube`) {
		t.Errorf("no ready line in logs:\n%s", logs)
	}
	http.DefaultClient.CloseIdleConnections()
}

func TestKubeConfigValidation(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "files only", args: []string{"--config-dir", "/etc/mesh"}},
		{name: "kubeconfig only", args: []string{"--kubeconfig", "/k"}},
		{name: "clusters only", args: []string{"--cluster", "a=/a", "--cluster", "b=/b"}},
		{name: "both sources need distinct ids", args: []string{"--config-dir", "/etc/mesh", "--kubeconfig", "/k"}, wantErr: "claimed by both"},
		{name: "both sources with a file cluster id", args: []string{"--config-dir", "/etc/mesh", "--kubeconfig", "/k", "--file-cluster-id", "files"}},
		{name: "no source", args: nil, wantErr: "no source"},
		{name: "malformed --cluster", args: []string{"--cluster", "a"}, wantErr: "want ID=KUBECONFIG"},
		{name: "duplicate --cluster ids", args: []string{"--cluster", "a=/a", "--cluster", "a=/b"}, wantErr: "claimed by both"},
		{name: "a --cluster id clashing with the config cluster", args: []string{"--kubeconfig", "/k", "--cluster", "Kubernetes=/b"}, wantErr: "claimed by both"},
		{name: "kubeconfig and in-cluster", args: []string{"--kubeconfig", "/k", "--in-cluster"}, wantErr: "--in-cluster"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("PILOTWIRE_CONFIG_DIR", "")
			var cfg ingest.Config
			fs := pflag.NewFlagSet("ingest", pflag.ContinueOnError)
			cfg.AddFlags(fs)
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := cfg.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate = %v, want an error about %q", err, tt.wantErr)
			}
		})
	}
}

func TestKubeFlagsFromEnv(t *testing.T) {
	t.Setenv("PILOTWIRE_CLUSTERS", "a=/a, b=/b")
	t.Setenv("PILOT_ENABLE_GATEWAY_API", "false")
	t.Setenv("PILOT_REMOTE_CLUSTER_TIMEOUT", "5s")
	var cfg ingest.Config
	fs := pflag.NewFlagSet("ingest", pflag.ContinueOnError)
	cfg.AddFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	got, err := cfg.KubeClusters()
	if err != nil {
		t.Fatal(err)
	}
	want := []ingest.KubeCluster{{ID: "a", Kubeconfig: "/a"}, {ID: "b", Kubeconfig: "/b"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("clusters (-want +got):\n%s", diff)
	}
	if cfg.EnableGatewayAPI || cfg.ClusterSyncTimeout != 5*time.Second || cfg.ClusterSecretsNamespace != "istio-system" {
		t.Errorf("config = %+v", cfg)
	}
}
