package filesource_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/services/ingest/filesource"
	"github.com/pilotwire/pilotwire/services/ingest/internal/ingesttest"
	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

const cluster = "Kubernetes"

var names = bus.Names{Prefix: "pw"}

// world is one NATS server and one config dir, shared by the source runs
// of a test (a restart is a second run).
type world struct {
	t    *testing.T
	js   jetstream.JetStream
	dir  string
	seen int // records already checked
	n    int // barriers written
}

func newWorld(t *testing.T) *world {
	_, js := natstest.Connect(t, natstest.Start(t))
	return &world{t: t, js: js, dir: t.TempDir()}
}

// run is one running file source with its publisher.
type run struct {
	reg    *prometheus.Registry
	logs   *ingesttest.LogBuffer
	ready  publish.Result
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

// start runs a publisher and a file source on the world's dir and waits
// until the initial scan is published.
func (w *world) start() *run {
	t := w.t
	t.Helper()
	r := &run{reg: prometheus.NewRegistry(), logs: &ingesttest.LogBuffer{}, done: make(chan error, 1)}
	log := slog.New(slog.NewTextHandler(r.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(context.Background(), ingesttest.Timeout)
	r.cancel = cancel
	pub, err := publish.New(w.js, publish.Options{Cluster: cluster, Names: names, Log: log, Registerer: r.reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Start(ctx); err != nil {
		t.Fatal(err)
	}
	src, err := filesource.New(pub, filesource.Options{Dir: w.dir, Quiet: 20 * time.Millisecond, Log: log, Registerer: r.reg})
	if err != nil {
		t.Fatal(err)
	}
	ready := make(chan publish.Result, 1)
	go func() { r.done <- src.Run(ctx, func(res publish.Result) { ready <- res }) }()
	select {
	case r.ready = <-ready:
	case err := <-r.done:
		t.Fatalf("source ended before ready: %v\n%s", err, r.logs)
	case <-ctx.Done():
		t.Fatalf("source not ready: %v\n%s", ctx.Err(), r.logs)
	}
	t.Cleanup(r.stop)
	return r
}

// stop ends the run and waits for it; a second call does nothing.
func (r *run) stop() {
	r.once.Do(func() {
		r.cancel()
		if err := <-r.done; err != nil {
			panic(fmt.Sprintf("source run: %v", err))
		}
	})
}

func (w *world) write(rel, content string) {
	w.t.Helper()
	p := filepath.Join(w.dir, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		w.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// writeByRename writes like an editor: a temp file renamed over the target.
func (w *world) writeByRename(rel, content string) {
	w.t.Helper()
	p := filepath.Join(w.dir, filepath.FromSlash(rel))
	tmp := p + ".tmp~"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		w.t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) remove(rel string) {
	w.t.Helper()
	if err := os.RemoveAll(filepath.Join(w.dir, filepath.FromSlash(rel))); err != nil {
		w.t.Fatal(err)
	}
}

func (w *world) rename(from, to string) {
	w.t.Helper()
	if err := os.Rename(filepath.Join(w.dir, filepath.FromSlash(from)), filepath.Join(w.dir, filepath.FromSlash(to))); err != nil {
		w.t.Fatal(err)
	}
}

// expect waits for the records a step should cause, then writes a barrier
// manifest and waits for its record. File events are delivered in order,
// and a batch is published sorted by key with the barrier's key last, so
// when the barrier is stored every record the step caused is stored before
// it: the step caused exactly the records between the last check and the
// barrier. It returns them (sorted by summary), without the barrier.
func (w *world) expect(want ...string) []ingesttest.Record {
	w.t.Helper()
	w.n++
	barrier := fmt.Sprintf("barrier-%03d", w.n)
	w.write(fmt.Sprintf("zz-barriers/%03d.yaml", w.n),
		"apiVersion: zzz.test/v1\nkind: Barrier\nmetadata:\n  name: "+barrier+"\n")
	ctx := ingesttest.Ctx(w.t)
	var recs []ingesttest.Record
	ingesttest.WaitFor(w.t, ctx, "barrier "+barrier, func() (bool, string) {
		all, err := ingesttest.TryRecords(ctx, w.js, names)
		if err != nil {
			return false, err.Error()
		}
		recs = all[w.seen:]
		for _, r := range recs {
			if r.Rec.GetRef().GetName() == barrier {
				return true, ""
			}
		}
		return false, strings.Join(ingesttest.Summaries(recs), "; ")
	})
	w.seen += len(recs)
	var got []ingesttest.Record
	for _, r := range recs {
		if r.Rec.GetRef().GetKind() != "Barrier" {
			got = append(got, r)
		}
	}
	slices.SortFunc(got, func(a, b ingesttest.Record) int { return strings.Compare(a.Summary(), b.Summary()) })
	slices.Sort(want)
	if diff := cmp.Diff(want, ingesttest.Summaries(got), cmpopts.EquateEmpty()); diff != "" {
		w.t.Fatalf("records (-want +got):\n%s", diff)
	}
	return got
}

func (r *run) metric(t *testing.T, name string, labels map[string]string) float64 {
	return ingesttest.Metric(t, r.reg, name, labels)
}

func svc(name, port string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata:\n  name: %s\nspec:\n  ports:\n  - port: %s\n", name, port)
}

func configMap(name, v string) string {
	return fmt.Sprintf("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: %s\n  namespace: default\ndata:\n  v: %q\n", name, v)
}

func filesourceNew(sink filesource.Sink, dir string) (*filesource.Source, error) {
	return filesource.New(sink, filesource.Options{Dir: dir})
}
