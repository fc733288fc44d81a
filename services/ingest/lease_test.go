package ingest_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ingest"
	"github.com/pilotwire/pilotwire/services/ingest/internal/ingesttest"
)

// TestRollingUpdateHasOneWriter: during a rolling update two instances
// own the same cluster id. The new one is ready at once but writes nothing
// while the old one holds the cluster's writer lease; when the old one
// stops, the new one takes over and publishes its difference.
func TestRollingUpdateHasOneWriter(t *testing.T) {
	url := natstest.Start(t)
	_, js := natstest.Connect(t, url)
	names := bus.Names{Prefix: "pw"}
	oldDir, newDir := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(oldDir, "bookinfo.yaml"), []byte(manifests), 0o644); err != nil {
		t.Fatal(err)
	}
	edited := strings.Replace(manifests, "10.0.0.7", "10.0.0.8", 1)
	if err := os.WriteFile(filepath.Join(newDir, "bookinfo.yaml"), []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	start := func(id, dir string) (*ingesttest.LogBuffer, *prometheus.Registry, func()) {
		t.Helper()
		cfg := ingest.Config{ConfigDir: dir, ClusterID: "east", FileDebounce: 20 * time.Millisecond, ID: id, LeaseTTL: time.Second}
		logs := &ingesttest.LogBuffer{}
		reg := prometheus.NewRegistry()
		health := &svc.Health{}
		ctx, cancel := context.WithTimeout(context.Background(), ingesttest.Timeout)
		done := make(chan error, 1)
		go func() {
			done <- ingest.Run(ctx, cfg, svc.Deps{JS: js, Log: slog.New(slog.NewTextHandler(logs, nil)), Reg: reg, Health: health})
		}()
		ingesttest.WaitFor(t, ingesttest.Ctx(t), id+" ready", func() (bool, string) { return health.Ready(), logs.String() })
		return logs, reg, func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run %s: %v", id, err)
			}
		}
	}
	_, oldReg, stopOld := start("old", oldDir)
	want := []string{"OP_ADD Service bookinfo/reviews", "OP_ADD EndpointSlice bookinfo/reviews-1", "OP_ADD DestinationRule bookinfo/reviews"}
	if diff := cmp.Diff(want, ingesttest.Summaries(ingesttest.Records(t, js, names))); diff != "" {
		t.Fatalf("records (-want +got):\n%s", diff)
	}
	newLogs, newReg, stopNew := start("new", newDir)
	defer stopNew()
	if got := ingesttest.Summaries(ingesttest.Records(t, js, names)); len(got) != 3 {
		t.Fatalf("the standby wrote while the old instance held the lease: %v", got)
	}
	ingesttest.WaitFor(t, ingesttest.Ctx(t), "the new instance standing by", func() (bool, string) {
		return strings.Contains(newLogs.String(), "holder=old"), newLogs.String()
	})
	if got := ingesttest.Metric(t, oldReg, "pilotwire_ingest_writer_active", map[string]string{"cluster": "east"}); got != 1 {
		t.Errorf("old writer_active = %v, want 1", got)
	}
	if got := ingesttest.Metric(t, newReg, "pilotwire_ingest_writer_active", map[string]string{"cluster": "east"}); got != 0 {
		t.Errorf("new writer_active = %v, want 0", got)
	}
	stopOld()
	ingesttest.WaitFor(t, ingesttest.Ctx(t), "the new instance's update", func() (bool, string) {
		got := ingesttest.Summaries(ingesttest.Records(t, js, names))
		return len(got) == 4 && got[3] == "OP_UPDATE EndpointSlice bookinfo/reviews-1", strings.Join(got, "; ")
	})
	testutil.Eventually(t, "new writer active", func() bool {
		return ingesttest.Metric(t, newReg, "pilotwire_ingest_writer_active", map[string]string{"cluster": "east"}) == 1
	})
}
