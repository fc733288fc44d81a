package ingest_test

import (
	"context"
	"flag"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pilotwire/pilotwire/internal/testkit/k8stest"
	"github.com/pilotwire/pilotwire/internal/testkit/kubemesh"
	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/natsembed"
	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ingest"
	"github.com/pilotwire/pilotwire/services/ingest/internal/ingesttest"
)

// The mesh of BenchmarkKubeIngest: -kubebench.services Services of
// kubemesh's mesh, each with one EndpointSlice of kubemesh.Endpoints ready
// endpoints (one Pod each, as the EndpointSlice controller writes them).
// Creating it in the apiserver is setup; on this 2-core machine 3,000
// services take about a minute (6,000 objects).
var (
	benchServicesFlag = flag.Int("kubebench.services", 3000, "Services (each with one EndpointSlice) in BenchmarkKubeIngest's mesh")
	benchPodsFlag     = flag.Int("kubebench.pods", 0, "Pods per Service in BenchmarkKubeIngest's mesh (at most 10: those its EndpointSlice names)")
)

const (
	// benchPatched is how many EndpointSlices watch_updates patches.
	benchPatched = 1000
	// benchTimeout bounds one iteration's wait.
	benchTimeout = 2 * time.Minute
)

// BenchmarkKubeIngest measures ingest end to end from a Kubernetes
// informer source: a real kube-apiserver (k8stest) holding benchServices
// Services and their EndpointSlices, ingest.Run as the service runs it
// (--kubeconfig, file storage), and embedded JetStream.
//
//   - initial_sync: from starting ingest.Run on an empty stream until the
//     service is ready, which it is once every record of the initial list
//     is stored; the stream then must hold exactly one record per listed
//     object. Starting Run includes the streams, the writer lease, the
//     informers' lists and CRD discovery.
//   - watch_updates: ingest synced and following; every EndpointSlice is
//     patched (an endpoint's address moves), and the timer runs from the
//     first patch to the last of their records on the stream, read with a
//     JetStream consumer (it sees stored records only). patch-s is the
//     time the apiserver took to accept the patches: when it is close to
//     the total, the apiserver, not ingest, bounds the rate.
//
// Besides records/s it reports cpu-s/op of this process (ingest, the
// embedded NATS server, and in watch_updates the patching client) and of
// the apiserver and etcd (its children). In a CPU profile (-cpuprofile)
// ingest's goroutines carry the label kubebench=ingest, the setup's and
// the patches' kubebench=setup and kubebench=patch; the embedded NATS
// server's carry none.
//
//	PILOTWIRE_K8S_BIN=... go test ./services/ingest -run '^$' -bench BenchmarkKubeIngest -benchtime 3x
func BenchmarkKubeIngest(b *testing.B) {
	if testing.Short() {
		b.Skip("integration benchmark against a real kube-apiserver")
	}
	benchServices := *benchServicesFlag
	c := k8stest.Start(b)
	kube, err := kubemesh.Client(c.Config)
	if err != nil {
		b.Fatal(err)
	}
	setup := time.Now()
	var want int
	pprof.Do(context.Background(), pprof.Labels("kubebench", "setup"), func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		if err = kubemesh.Create(ctx, kube, benchServices, *benchPodsFlag); err == nil {
			want, err = kubemesh.Listed(ctx, kube)
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("mesh: %d services x %d endpoints, %d objects to record, created in %v",
		benchServices, kubemesh.Endpoints, want, time.Since(setup).Round(time.Millisecond))

	b.Run("initial_sync", func(b *testing.B) {
		b.ReportAllocs()
		var total, cpu, kubeCPU time.Duration
		for range b.N {
			b.StopTimer()
			js, stop := benchNATS(b)
			in := newBenchIngest(c.Kubeconfig)
			b.StartTimer()
			start, cpu0, kcpu0 := time.Now(), selfCPU(), childrenCPU()
			in.start(b, js)
			in.waitReady(b)
			got := streamMsgs(b, js)
			total += time.Since(start)
			cpu += selfCPU() - cpu0
			kubeCPU += childrenCPU() - kcpu0
			b.StopTimer()
			if got != uint64(want) {
				b.Fatalf("stream holds %d records once ingest is ready, want %d (one per listed object)", got, want)
			}
			in.stop(b)
			stop()
			b.StartTimer()
		}
		b.ReportMetric(float64(want)*float64(b.N)/total.Seconds(), "records/s")
		b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
		b.ReportMetric(kubeCPU.Seconds()/float64(b.N), "kube-cpu-s/op")
	})

	gen := 0 // the endpoints' generation in the apiserver
	b.Run("watch_updates", func(b *testing.B) {
		b.StopTimer()
		js, stop := benchNATS(b)
		defer stop()
		in := newBenchIngest(c.Kubeconfig)
		in.start(b, js)
		defer in.stop(b)
		in.waitReady(b)
		slices := kubemesh.Slices(min(benchServices, benchPatched))
		b.ReportAllocs()
		b.StartTimer()
		var total, patching, lag, cpu, kubeCPU time.Duration
		for range b.N {
			b.StopTimer()
			before := streamMsgs(b, js)
			w := watchRecords(b, js, len(slices))
			gen++ // across runs: the apiserver keeps the last one's
			b.StartTimer()
			start, cpu0, kcpu0 := time.Now(), selfCPU(), childrenCPU()
			pprof.Do(context.Background(), pprof.Labels("kubebench", "patch"), func(ctx context.Context) {
				ctx, cancel := context.WithTimeout(ctx, benchTimeout)
				defer cancel()
				if err := kubemesh.Patch(ctx, kube, slices, gen); err != nil {
					b.Fatal(err)
				}
			})
			patched := time.Now()
			w.wait(b)
			end := time.Now()
			patching += patched.Sub(start)
			lag += end.Sub(patched)
			total += end.Sub(start)
			cpu += selfCPU() - cpu0
			kubeCPU += childrenCPU() - kcpu0
			b.StopTimer()
			w.stop()
			if got := streamMsgs(b, js) - before; got != uint64(len(slices)) {
				b.Fatalf("%d patched EndpointSlices made %d records, want one each", len(slices), got)
			}
			b.StartTimer()
		}
		n := float64(len(slices) * b.N)
		b.ReportMetric(n/total.Seconds(), "records/s")
		b.ReportMetric(patching.Seconds()/float64(b.N), "patch-s/op")
		b.ReportMetric(float64(lag)/float64(time.Millisecond)/float64(b.N), "lag-ms/op")
		b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
		b.ReportMetric(kubeCPU.Seconds()/float64(b.N), "kube-cpu-s/op")
	})
}

// benchNATS starts a fresh embedded JetStream with file storage.
func benchNATS(b *testing.B) (jetstream.JetStream, func()) {
	b.Helper()
	s, err := natsembed.Start(natsembed.Options{Addr: "127.0.0.1:0", StoreDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	nc, js := natstest.Connect(b, s.URL())
	return js, func() { nc.Close(); s.Shutdown() }
}

// benchIngest is one ingest.Run.
type benchIngest struct {
	cfg    ingest.Config
	logs   *ingesttest.LogBuffer
	ready  chan struct{}
	cancel context.CancelFunc
	done   chan error
}

func newBenchIngest(kubeconfig string) *benchIngest {
	cfg := ingest.DefaultConfig()
	cfg.Kubeconfig, cfg.ClusterID = kubeconfig, "kube"
	cfg.ClusterSyncTimeout = benchTimeout
	return &benchIngest{cfg: cfg, ready: make(chan struct{})}
}

func (in *benchIngest) start(b *testing.B, js jetstream.JetStream) {
	b.Helper()
	in.logs = &ingesttest.LogBuffer{}
	b.Cleanup(func() {
		if b.Failed() {
			b.Logf("ingest logs:\n%s", in.logs)
		}
	})
	log := slog.New(&readyHandler{next: slog.NewTextHandler(in.logs, nil), ready: in.ready, once: new(sync.Once)})
	ctx, cancel := context.WithCancel(context.Background())
	in.cancel, in.done = cancel, make(chan error, 1)
	// The label marks ingest's goroutines (and those they start) in a CPU
	// profile: -tagfocus kubebench=ingest.
	go pprof.Do(ctx, pprof.Labels("kubebench", "ingest"), func(ctx context.Context) {
		in.done <- ingest.Run(ctx, in.cfg, svc.Deps{JS: js, Log: log})
	})
}

func (in *benchIngest) waitReady(b *testing.B) {
	b.Helper()
	deadline := time.NewTimer(benchTimeout)
	defer deadline.Stop()
	select {
	case <-in.ready:
	case err := <-in.done:
		b.Fatalf("ingest stopped before ready: %v", err)
	case <-deadline.C:
		b.Fatalf("ingest not ready within %s", benchTimeout)
	}
}

func (in *benchIngest) stop(b *testing.B) {
	b.Helper()
	in.cancel()
	if err := <-in.done; err != nil {
		b.Errorf("ingest.Run: %v", err)
	}
}

// readyHandler passes logs on to next; ingest's "ingest ready", which the
// service logs once every source is ready, also closes ready.
type readyHandler struct {
	next  slog.Handler
	ready chan struct{}
	once  *sync.Once
}

func (h *readyHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }
func (h *readyHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "ingest ready" {
		h.once.Do(func() { close(h.ready) })
	}
	return h.next.Handle(ctx, r)
}
func (h *readyHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &readyHandler{next: h.next.WithAttrs(as), ready: h.ready, once: h.once}
}
func (h *readyHandler) WithGroup(g string) slog.Handler {
	return &readyHandler{next: h.next.WithGroup(g), ready: h.ready, once: h.once}
}

// streamMsgs reads the CHANGES stream's message count.
func streamMsgs(b *testing.B, js jetstream.JetStream) uint64 {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	s, err := js.Stream(ctx, bus.Names{Prefix: bus.DefaultPrefix}.ChangesStream())
	if err != nil {
		b.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	return info.State.Msgs
}

// recordWatch counts records stored on the CHANGES stream after it
// started, with an ordered consumer.
type recordWatch struct {
	js   jetstream.JetStream
	cc   jetstream.ConsumeContext
	n    atomic.Int64
	want int64
	done chan struct{}
	once sync.Once
}

func watchRecords(b *testing.B, js jetstream.JetStream, want int) *recordWatch {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), benchTimeout)
	defer cancel()
	s, err := js.Stream(ctx, bus.Names{Prefix: bus.DefaultPrefix}.ChangesStream())
	if err != nil {
		b.Fatal(err)
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		b.Fatal(err)
	}
	w := &recordWatch{js: js, want: int64(want), done: make(chan struct{})}
	w.cc, err = cons.Consume(func(jetstream.Msg) {
		if w.n.Add(1) == w.want {
			w.once.Do(func() { close(w.done) })
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	return w
}

func (w *recordWatch) wait(b *testing.B) {
	b.Helper()
	deadline := time.NewTimer(benchTimeout)
	defer deadline.Stop()
	select {
	case <-w.done:
	case <-deadline.C:
		b.Fatalf("%d of %d records delivered after %s (the stream holds %d)", w.n.Load(), w.want, benchTimeout, streamMsgs(b, w.js))
	}
}

func (w *recordWatch) stop() {
	w.cc.Stop()
	<-w.cc.Closed()
}

// selfCPU is this process's user and system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// childrenCPU is the CPU time of this process's running children (the
// apiserver and etcd), from /proc; 0 where there is no /proc.
func childrenCPU() time.Duration {
	self := strconv.Itoa(os.Getpid())
	dirs, _ := filepath.Glob("/proc/[0-9]*/stat")
	var ticks int64
	for _, p := range dirs {
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ... utime stime: fields 4, 14, 15.
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 13 || f[1] != self {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		ticks += u + st
	}
	return time.Duration(ticks) * time.Second / 100 // USER_HZ
}
