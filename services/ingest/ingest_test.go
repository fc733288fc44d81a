package ingest_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"go.uber.org/goleak"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ingest"
	"github.com/pilotwire/pilotwire/services/ingest/internal/ingesttest"
)

// nats.go's own leak on an object store Put (natstest.UpstreamLeaks) is
// ignored; every other goroutine is checked.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, natstest.UpstreamLeaks()...) }

const manifests = `apiVersion: v1
kind: Service
metadata:
  name: reviews
  namespace: bookinfo
spec:
  ports:
  - {name: http, port: 9080}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: reviews-1
  namespace: bookinfo
  labels: {kubernetes.io/service-name: reviews}
addressType: IPv4
endpoints:
- addresses: [10.0.0.7]
ports:
- {name: http, port: 9080}
---
apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata:
  name: reviews
  namespace: bookinfo
spec:
  host: reviews
`

// TestRunInProcess runs the whole service twice on one directory: the
// first run publishes the directory and follows an edit, the second (a
// restart) publishes nothing.
func TestRunInProcess(t *testing.T) {
	url := natstest.Start(t)
	_, js := natstest.Connect(t, url)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bookinfo.yaml"), []byte(manifests), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := ingest.Config{
		Common:       svc.Common{Prefix: "mesh1"},
		ConfigDir:    dir,
		ClusterID:    "east",
		FileDebounce: 20 * time.Millisecond,
	}
	names := bus.Names{Prefix: "mesh1"}
	reg := prometheus.NewRegistry()

	start := func() (*svc.Health, *ingesttest.LogBuffer, func()) {
		t.Helper()
		logs := &ingesttest.LogBuffer{}
		log := slog.New(slog.NewTextHandler(logs, nil)).With("component", "ingest")
		health := &svc.Health{}
		ctx, cancel := context.WithTimeout(context.Background(), ingesttest.Timeout)
		done := make(chan error, 1)
		go func() { done <- ingest.Run(ctx, cfg, svc.Deps{JS: js, Log: log, Reg: reg, Health: health}) }()
		ingesttest.WaitFor(t, ingesttest.Ctx(t), "ready", func() (bool, string) { return health.Ready(), logs.String() })
		stop := func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		}
		return health, logs, stop
	}

	_, logs, stop := start()
	if !strings.Contains(logs.String(), `msg="ingest ready" component=ingest cluster=east`) {
		t.Errorf("no ready line in logs:\n%s", logs)
	}
	// Sorted by key: core group first, then by group name.
	want := []string{"OP_ADD Service bookinfo/reviews", "OP_ADD EndpointSlice bookinfo/reviews-1", "OP_ADD DestinationRule bookinfo/reviews"}
	recs := ingesttest.Records(t, js, names)
	got := ingesttest.Summaries(recs)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
	for _, r := range recs {
		if !strings.HasPrefix(r.Subject, "mesh1.changes.east.") || r.Rec.GetCluster() != "east" {
			t.Errorf("record %s on %s for cluster %q", r.Summary(), r.Subject, r.Rec.GetCluster())
		}
	}

	edited := strings.Replace(manifests, "10.0.0.7", "10.0.0.8", 1)
	if err := os.WriteFile(filepath.Join(dir, "bookinfo.yaml"), []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	ingesttest.WaitFor(t, ingesttest.Ctx(t), "endpoint update", func() (bool, string) {
		got := ingesttest.Summaries(ingesttest.Records(t, js, names))
		return len(got) == 4 && got[3] == "OP_UPDATE EndpointSlice bookinfo/reviews-1", strings.Join(got, "; ")
	})
	if got := ingesttest.Metric(t, reg, "pilotwire_ingest_records_published_total", map[string]string{"kind": "EndpointSlice.discovery.k8s.io", "op": "UPDATE"}); got != 1 {
		t.Errorf("published{EndpointSlice,UPDATE} = %v, want 1", got)
	}
	stop()

	_, _, stop = start()
	defer stop()
	if n := len(ingesttest.Records(t, js, names)); n != 4 {
		t.Errorf("restart with unchanged files: stream has %d records, want 4", n)
	}
	if got := ingesttest.Metric(t, reg, "pilotwire_ingest_objects", nil); got != 3 {
		t.Errorf("objects gauge = %v, want 3", got)
	}
}

func TestConfigFlagsAndEnv(t *testing.T) {
	t.Setenv("PILOTWIRE_CONFIG_DIR", "/etc/mesh")
	t.Setenv("PILOTWIRE_CLUSTER_ID", "west")
	var cfg ingest.Config
	fs := pflag.NewFlagSet("ingest", pflag.ContinueOnError)
	cfg.AddFlags(fs)
	if err := fs.Parse([]string{"--file-debounce=50ms"}); err != nil {
		t.Fatal(err)
	}
	if cfg.ConfigDir != "/etc/mesh" || cfg.ClusterID != "west" || cfg.FileDebounce != 50*time.Millisecond || cfg.HTTPAddr != ingest.DefaultHTTPAddr {
		t.Errorf("config = %+v", cfg)
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("validate: %v", err)
	}
	cfg.ConfigDir, cfg.Prefix = "", "bad prefix"
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "--config-dir") || !strings.Contains(err.Error(), "prefix") {
		t.Errorf("validate = %v, want config-dir and prefix errors", err)
	}
}

// TestRunReadyOnlyAfterTheSources: the service is ready, and logs "ingest
// ready", only once its source has published what it sees; never in
// between opening the streams and starting the sources. The log handler
// reads the stream and the health at the moment the line is logged.
func TestRunReadyOnlyAfterTheSources(t *testing.T) {
	url := natstest.Start(t)
	_, js := natstest.Connect(t, url)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "bookinfo.yaml"), []byte(manifests), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := ingest.Config{Common: svc.Common{Prefix: "pw"}, ConfigDir: dir, ClusterID: "east", FileDebounce: 20 * time.Millisecond}
	health := &svc.Health{}
	atReady := make(chan int, 1)
	h := &onMessage{msg: "ingest ready", f: func() {
		rs, err := ingesttest.TryRecords(context.Background(), js, bus.Names{Prefix: "pw"})
		if err != nil {
			t.Errorf("read the stream: %v", err)
		}
		atReady <- len(rs)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), ingesttest.Timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- ingest.Run(ctx, cfg, svc.Deps{JS: js, Log: slog.New(h), Health: health}) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case n := <-atReady:
		if n != 3 {
			t.Errorf("stream held %d records when ingest logged ready, want the directory's 3", n)
		}
	case <-ctx.Done():
		t.Fatal("ingest never logged ready")
	}
}

// onMessage is a slog handler that calls f, once, on the first record with
// message msg, from the logging goroutine.
type onMessage struct {
	msg  string
	f    func()
	once sync.Once
}

func (h *onMessage) Enabled(context.Context, slog.Level) bool { return true }
func (h *onMessage) Handle(_ context.Context, r slog.Record) error {
	if r.Message == h.msg {
		h.once.Do(h.f)
	}
	return nil
}
func (h *onMessage) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *onMessage) WithGroup(string) slog.Handler      { return h }
