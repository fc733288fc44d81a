package ads

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/svc"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
	"github.com/pilotwire/pilotwire/services/pusher"
)

// BenchmarkFanOutNATS is one endpoint push to 5,000 state-of-the-world
// sidecars on two ADS frontends, through the real pusher and NATS
// (embedded JetStream; pusher, both frontends and the clients in this
// process; the debouncer is left out: the benchmark publishes the
// PushRequest itself). Each client is a raw ADS stream on its own gRPC
// connection that ACKs every response. Per push it reports the spread from
// the first to the last proxy receiving the load assignment (mean over
// pushes), the p50 and p99 over every proxy of every push of the time from
// the PushRequest's publication to the proxy receiving it, and the CPU the
// whole process used per push (pusher, frontends, NATS server and clients
// together). -short runs 500 proxies, PILOTWIRE_BENCH_PROXIES another
// number; PILOT_PUSH_THROTTLE fixes the pusher's throttle.
//
// -pushprofile FILE writes a CPU profile of the pushes alone (not the set-up
// and initial sync that -test.cpuprofile would include).
func BenchmarkFanOutNATS(b *testing.B) {
	n := svc.EnvInt("PILOTWIRE_BENCH_PROXIES", 5000)
	if testing.Short() {
		n = 500
	}
	b.Run(fmt.Sprintf("conns=%d/frontends=2", n), func(b *testing.B) { benchFanOutNATS(b, n, 2) })
}

func benchFanOutNATS(b *testing.B, proxies, frontends int) {
	const services = 100
	f0 := startFrontend(b, meshOf(b, services))
	fes := []*frontend{f0}
	for i := 1; i < frontends; i++ {
		fes = append(fes, runFrontend(b, f0.url, fmt.Sprintf("fe-%d", i+1), nil))
	}
	preg := startBenchPusher(b, f0.url)

	var clusters []string
	for i := range services {
		clusters = append(clusters, fmt.Sprintf("outbound|80||s%03d.default.svc.cluster.local", i))
	}
	fl := &fleet{times: make([]time.Time, proxies)}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	b.Cleanup(func() { cancel(); wg.Wait() })
	fl.round.Store(-1)
	fl.arm(proxies) // the initial sync counts as round 0
	fl.round.Store(0)
	for i := range proxies {
		cc, err := grpc.NewClient(fes[i%frontends].addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cc.Close() })
		st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
		if err != nil {
			b.Fatal(err)
		}
		node := sidecar()
		node.Id = fmt.Sprintf("sidecar~10.1.%d.%d~p%d.bench~bench.svc.cluster.local", i/250, i%250+1, i)
		if err := st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: resource.ClusterType}); err != nil {
			b.Fatal(err)
		}
		if err := st.Send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: clusters}); err != nil {
			b.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); fl.client(st, i, clusters) }()
	}
	fl.wait(b, "initial sync of every proxy")
	testutil.Eventually(b, "pusher knows every connection", func() bool {
		return testutil.Metric(preg, "pilotwire_pusher_connections") == float64(proxies)
	})
	// A connection's entry is written first with its CDS watch, again once
	// it names its load assignments: wait for the second, or the first
	// pushes would be scoped against (and race with) late entries.
	for _, f := range fes {
		waitWatching(b, f, resource.EndpointType)
	}

	var lat []time.Duration
	var spread, cpu time.Duration
	stopProfile := startPushProfile(b)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		seq := f0.publish(b, pb.Op_OP_UPDATE, "discovery.k8s.io", "EndpointSlice", slice("default", "s007", 8080, fmt.Sprintf("10.200.%d.%d", i/250, i%250+1)))
		for _, f := range fes {
			f.waitApplied(b, seq)
		}
		pr := &pb.PushRequest{
			ConfigKeys: []*pb.ConfigKey{{Kind: "Service", Namespace: "default", Name: "s007", Cluster: "c1"}},
			Reasons:    map[string]int32{"EndpointUpdate": 1},
			ThroughSeq: seq, FirstSeq: seq, CompleteThroughSeq: seq, MergedEvents: 1,
			Covered: []*pb.SeqRange{{First: seq, Last: seq}},
		}
		data, _ := proto.Marshal(pr)
		fl.arm(proxies)
		b.StartTimer()
		cpu0 := processCPU()
		t0 := time.Now()
		fl.round.Store(int64(i + 1))
		pctx, pcancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
		_, err := f0.js.Publish(pctx, f0.names.PushesSubject(), data)
		pcancel()
		if err != nil {
			b.Fatal(err)
		}
		fl.wait(b, fmt.Sprintf("push %d at every proxy", i+1))
		cpu += processCPU() - cpu0
		b.StopTimer()
		first, last := fl.times[0], fl.times[0]
		for _, t := range fl.times {
			lat = append(lat, t.Sub(t0))
			if t.Before(first) {
				first = t
			}
			if t.After(last) {
				last = t
			}
		}
		spread += last.Sub(first)
		b.StartTimer()
	}
	b.StopTimer()
	stopProfile()
	slices.Sort(lat)
	b.ReportMetric(float64(spread.Milliseconds())/float64(b.N), "spread-ms")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds())/1000, "p99-ms")
	b.ReportMetric(cpu.Seconds()*1000/float64(b.N), "cpu-ms/push")
	// Pushes lost and resynced (a done that never came, a failed send):
	// each costs a connection a push timeout.
	b.ReportMetric(testutil.Metric(preg, "pilotwire_pusher_lost_pushes_total"), "lost")
}

var pushProfile = flag.String("pushprofile", "", "BenchmarkFanOutNATS: write a CPU profile of the pushes alone to this file")

// startPushProfile starts the -pushprofile CPU profile, if asked, and
// returns its stop.
func startPushProfile(t testing.TB) func() {
	if *pushProfile == "" {
		return func() {}
	}
	f, err := os.Create(*pushProfile)
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	return func() { pprof.StopCPUProfile(); f.Close() }
}

// fleet tracks, per round, when each client first received a load
// assignment.
type fleet struct {
	round     atomic.Int64 // the push being measured; a client counts once per round
	remaining atomic.Int64 // clients yet to receive this round's push
	done      chan struct{}
	times     []time.Time // written by client i's goroutine, read after done
}

func (fl *fleet) arm(n int) {
	fl.done = make(chan struct{})
	fl.remaining.Store(int64(n))
}

func (fl *fleet) wait(t testing.TB, what string) {
	t.Helper()
	tm := time.NewTimer(testutil.DefaultTimeout)
	defer tm.Stop()
	select {
	case <-fl.done:
	case <-tm.C:
		t.Fatalf("timed out waiting for %s: %d proxies left", what, fl.remaining.Load())
	}
}

// client is one proxy's receive loop: it ACKs every response and notes the
// first load assignment of each round.
func (fl *fleet) client(st grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse], i int, clusters []string) {
	seen := int64(-1)
	for {
		r, err := st.Recv()
		if err != nil {
			return
		}
		var names []string
		if r.GetTypeUrl() == resource.EndpointType {
			names = clusters
			if cur := fl.round.Load(); cur != seen {
				seen = cur
				fl.times[i] = time.Now()
				if fl.remaining.Add(-1) == 0 {
					close(fl.done)
				}
			}
		}
		if st.Send(&discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce(), ResourceNames: names}) != nil {
			return
		}
	}
}

// startBenchPusher runs the real pusher on the NATS server at url until the
// benchmark ends and returns its metrics registry once it is active.
func startBenchPusher(t testing.TB, url string) *prometheus.Registry {
	t.Helper()
	nc, js := natstest.Connect(t, url)
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- pusher.Run(ctx, pusher.Config{Common: svc.Common{NATSURL: url, Prefix: "pw"}, ID: "bench-pusher", Throttle: svc.EnvInt("PILOT_PUSH_THROTTLE", 0)},
			svc.Deps{NC: nc, JS: js, Log: slog.New(slog.DiscardHandler), Reg: reg, Health: &svc.Health{}})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("pusher.Run() = %v", err)
		}
	})
	testutil.Eventually(t, "pusher active", func() bool { return testutil.Metric(reg, "pilotwire_pusher_leader") == 1 })
	return reg
}

// waitWatching waits until every connection entry f wrote names resources
// of type typeURL.
func waitWatching(t testing.TB, f *frontend, typeURL string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	kv, err := f.js.KeyValue(ctx, f.names.RegistryBucket())
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "every entry of "+f.id+" watching "+typeURL, func() bool {
		lister, err := kv.ListKeysFiltered(ctx, "conn."+f.id+".>")
		if err != nil {
			return false
		}
		ok := true
		for k := range lister.Keys() {
			if !ok {
				continue // drain the lister
			}
			e, err := kv.Get(ctx, k)
			ci := &pb.ConnectionInfo{}
			if err != nil || proto.Unmarshal(e.Value(), ci) != nil || !slices.ContainsFunc(ci.GetWatches(), func(w *pb.Watch) bool {
				return w.GetTypeUrl() == typeURL && len(w.GetNames()) > 0
			}) {
				ok = false
			}
		}
		return ok
	})
}

// processCPU is the user and system CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
