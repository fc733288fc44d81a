package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/debounce"
	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ads"
	"github.com/pilotwire/pilotwire/services/debouncer"
	"github.com/pilotwire/pilotwire/services/ingest"
	"github.com/pilotwire/pilotwire/services/pusher"
)

// services runs the four services in-process against url, each with its
// own connection, logger, registry and health, until the test ends.
type services struct {
	regs    map[string]*prometheus.Registry
	healths map[string]*svc.Health
	errs    chan error
	adsAddr chan string // the frontend's, once it listens
}

// users, when set, gives each service ("ingest", "debouncer", "pusher",
// "ads") its NATS credentials.
func startServices(t *testing.T, url, dir string, common svc.Common, users ...map[string]svc.NATSAuth) *services {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	s := &services{regs: map[string]*prometheus.Registry{}, healths: map[string]*svc.Health{}, errs: make(chan error, 4), adsAddr: make(chan string, 1)}
	start := func(name string, run func(context.Context, svc.Deps) error) {
		var auth svc.NATSAuth
		if len(users) > 0 {
			auth = users[0][name]
		}
		cctx, ccancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
		defer ccancel()
		log := slog.New(slog.NewTextHandler(pipelinetest.TestWriter{T: t}, &slog.HandlerOptions{Level: slog.LevelDebug})).With("component", name)
		nc, js, err := svc.Connect(cctx, url, name, auth, log, prometheus.NewCounter(prometheus.CounterOpts{Name: "c", Help: "c"}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		d := svc.Deps{
			NC: nc, JS: js,
			Log:    log,
			Reg:    prometheus.NewRegistry(),
			Health: &svc.Health{},
		}
		s.regs[name], s.healths[name] = d.Reg, d.Health
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := run(ctx, d); err != nil && !errors.Is(err, context.Canceled) {
				s.errs <- fmt.Errorf("%s: %w", name, err)
			}
		}()
	}
	start("ingest", func(ctx context.Context, d svc.Deps) error {
		return ingest.Run(ctx, ingest.Config{Common: common, ConfigDir: dir, ClusterID: "Kubernetes", FileDebounce: 20 * time.Millisecond}, d)
	})
	start("debouncer", func(ctx context.Context, d svc.Deps) error {
		cfg := debounce.DefaultConfig()
		cfg.DebounceAfter = 20 * time.Millisecond
		return debouncer.Run(ctx, debouncer.Config{Common: common, Debounce: cfg}, d)
	})
	start("pusher", func(ctx context.Context, d svc.Deps) error {
		return pusher.Run(ctx, pusher.Config{Common: common, ID: "pusher-0"}, d)
	})
	start("ads", func(ctx context.Context, d svc.Deps) error {
		return ads.Run(ctx, ads.Config{Common: common, ADSAddr: "127.0.0.1:0", FrontendID: "ads-0", MaxConnectionAge: time.Hour, RecordDeliveries: true,
			OnListen: func(a string) { s.adsAddr <- a }}, d)
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		close(s.errs)
		for err := range s.errs {
			t.Errorf("service failed: %v", err)
		}
	})
	return s
}

// waitFor polls cond, failing at the deadline or at once when a service
// exits with an error.
func (s *services) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, what, func() bool {
		select {
		case err := <-s.errs:
			t.Fatalf("waiting for %s: %v", what, err)
		default:
		}
		return cond()
	})
}

// TestStartBeforeClusterElects starts the four services at once, with
// --replicas 3, against a 3-node NATS cluster of which only one node runs:
// no JetStream meta leader, no stream. Every service must wait (counting
// and logging its retries), not exit, and all come up once the other two
// nodes join, as in a Helm install where NATS and pilotwire start
// together.
func TestStartBeforeClusterElects(t *testing.T) {
	c := natstest.NewCluster(t, natstest.ClusterOptions{})
	c.Start(0)
	dir := t.TempDir()
	pipelinetest.WriteFile(t, dir, "mesh.yaml", meshYAML)
	s := startServices(t, c.URLs(), dir, svc.Common{NATSURL: c.URLs(), Prefix: "pw", Replicas: 3})

	for _, name := range []string{"ingest", "debouncer", "pusher", "ads"} {
		s.waitFor(t, name+" retrying its streams", func() bool {
			return testutil.Metric(s.regs[name], "pilotwire_stream_ensure_retries_total") > 0
		})
	}
	c.Start(1)
	c.Start(2)
	for name, h := range s.healths {
		s.waitFor(t, name+" ready", h.Ready)
	}
}

// TestServicesKeepClusterReplicas: on a 3-node cluster whose streams and
// buckets are at 3 replicas, services started without --replicas 3 leave
// them at 3 and report the drift (a log line and pilotwire_stream_drift),
// where they used to reconfigure every stream down to one replica.
func TestServicesKeepClusterReplicas(t *testing.T) {
	c := natstest.StartCluster(t, natstest.ClusterOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	_, js := natstest.Connect(t, c.URLs())
	names, err := bus.NewNames("pw")
	if err != nil {
		t.Fatal(err)
	}
	r3 := bus.StreamOptions{Replicas: 3}
	streams := []string{names.ChangesStream(), names.PushesStream(), names.DeliveriesStream(), "KV_" + names.RegistryBucket(), "KV_" + names.LeaseBucket()}
	for _, cfg := range []jetstream.StreamConfig{names.ChangesConfig(r3), names.PushesConfig(r3), names.DeliveriesConfig(r3)} {
		if _, err := bus.EnsureStream(ctx, js, cfg); err != nil {
			t.Fatal(err)
		}
	}
	for _, cfg := range []jetstream.KeyValueConfig{names.RegistryConfig(r3), names.LeaseConfig(r3)} {
		if _, err := bus.EnsureKV(ctx, js, cfg); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := bus.EnsureObjectStore(ctx, js, names.SnapshotsConfig(r3)); err != nil {
		t.Fatal(err)
	}
	streams = append(streams, "OBJ_"+names.SnapshotBucket())
	dir := t.TempDir()
	pipelinetest.WriteFile(t, dir, "mesh.yaml", meshYAML)
	s := startServices(t, c.URLs(), dir, svc.Common{NATSURL: c.URLs(), Prefix: "pw"})
	for name, h := range s.healths {
		s.waitFor(t, name+" ready", h.Ready)
	}
	for _, name := range streams {
		info, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := info.CachedInfo().Config.Replicas; got != 3 {
			t.Errorf("stream %s has %d replicas after the services started, want 3 (left alone)", name, got)
		}
	}
	for _, name := range []string{"ingest", "debouncer", "pusher", "ads"} {
		if got := testutil.Metric(s.regs[name], "pilotwire_stream_drift"); got == 0 {
			t.Errorf("%s: pilotwire_stream_drift = 0, want the replica drift reported", name)
		}
	}
	// The snapshot bucket's writer checks it too, once its snapshotter
	// starts (beside the debouncer's own work).
	s.waitFor(t, "the debouncer reporting the snapshot bucket's drift", func() bool {
		return testutil.Metric(s.regs["debouncer"], `pilotwire_stream_drift{name="`+names.SnapshotBucket()+`",field="replicas"}`) == 1
	})
}
