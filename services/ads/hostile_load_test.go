package ads

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/nats-io/nats.go"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// A hostile client: run loops (reconnecting whenever its stream is shed)
// until ctx ends. shedAs is the reason its streams are counted under.
type hostileKind struct {
	name, shedAs string
	run          func(ctx context.Context, h *hostileEnv)
}

// hostileEnv is what a hostile client knows: where to connect and what the
// mesh names.
type hostileEnv struct {
	addr     string
	clusters []string
	f        *frontend
}

type sotwStreamClient = grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse]

// streams opens one stream after another on one client connection, calling
// each until ctx ends. A stream's context ends with the call.
func (h *hostileEnv) streams(ctx context.Context, each func(ctx context.Context, s sotwStreamClient), opts ...grpc.DialOption) {
	cc, err := grpc.NewClient(h.addr, append(opts, grpc.WithTransportCredentials(insecure.NewCredentials()))...)
	if err != nil {
		return
	}
	defer cc.Close()
	client := discovery.NewAggregatedDiscoveryServiceClient(cc)
	for ctx.Err() == nil {
		sctx, cancel := context.WithCancel(ctx)
		if s, err := client.StreamAggregatedResources(sctx); err == nil {
			each(sctx, s)
		}
		cancel()
	}
}

// drain reads s until it ends.
func drain(s sotwStreamClient) {
	for {
		if _, err := s.Recv(); err != nil {
			return
		}
	}
}

// flood sends req on s until the stream ends.
func flood(s sotwStreamClient, req *discovery.DiscoveryRequest) {
	done := make(chan struct{})
	go func() { drain(s); close(done) }()
	for {
		if s.Send(req) != nil {
			break
		}
		select {
		case <-done:
			return
		default:
		}
	}
	<-done
}

var hostileKinds = []hostileKind{
	{name: "no_node", shedAs: "node", run: func(ctx context.Context, h *hostileEnv) {
		h.streams(ctx, func(_ context.Context, s sotwStreamClient) {
			if s.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType}) == nil {
				drain(s)
			}
		})
	}},
	{name: "unknown_type", shedAs: "type_url", run: func(ctx context.Context, h *hostileEnv) {
		h.streams(ctx, func(_ context.Context, s sotwStreamClient) {
			if s.Send(&discovery.DiscoveryRequest{Node: sidecar(), TypeUrl: "clusters"}) == nil {
				drain(s)
			}
		})
	}},
	{name: "100k_names", shedAs: "too_many_names", run: func(ctx context.Context, h *hostileEnv) {
		req := &discovery.DiscoveryRequest{Node: sidecar(), TypeUrl: resource.EndpointType, ResourceNames: make([]string, 100_000)}
		for i := range req.ResourceNames {
			req.ResourceNames[i] = fmt.Sprintf("n%06d", i)
		}
		h.streams(ctx, func(_ context.Context, s sotwStreamClient) {
			if s.Send(req) == nil {
				drain(s)
			}
		})
	}},
	{name: "stale_nonce", shedAs: "request_rate", run: func(ctx context.Context, h *hostileEnv) {
		h.streams(ctx, func(_ context.Context, s sotwStreamClient) {
			eds := &discovery.DiscoveryRequest{Node: sidecar(), TypeUrl: resource.EndpointType, ResourceNames: h.clusters[:1]}
			if s.Send(eds) != nil {
				return
			}
			first, err := s.Recv()
			if err != nil {
				return
			}
			eds = &discovery.DiscoveryRequest{Node: sidecar(), TypeUrl: resource.EndpointType, ResourceNames: h.clusters[:2], ResponseNonce: first.GetNonce()}
			if s.Send(eds) != nil {
				return
			}
			if _, err := s.Recv(); err != nil {
				return
			}
			// Answers to the first response, again and again.
			flood(s, &discovery.DiscoveryRequest{Node: sidecar(), TypeUrl: resource.EndpointType, ResourceNames: h.clusters[:1], ResponseNonce: first.GetNonce()})
		})
	}},
	{name: "forged_nonce", shedAs: "forged_nonce", run: func(ctx context.Context, h *hostileEnv) {
		h.streams(ctx, func(_ context.Context, s sotwStreamClient) {
			if s.Send(&discovery.DiscoveryRequest{Node: sidecar(), TypeUrl: resource.ClusterType}) != nil {
				return
			}
			if _, err := s.Recv(); err != nil {
				return
			}
			if s.Send(&discovery.DiscoveryRequest{Node: sidecar(), TypeUrl: resource.ClusterType, ResponseNonce: "forged"}) == nil {
				drain(s)
			}
		})
	}},
	{name: "nack_storm", shedAs: "request_rate", run: func(ctx context.Context, h *hostileEnv) {
		h.streams(ctx, func(_ context.Context, s sotwStreamClient) {
			if s.Send(&discovery.DiscoveryRequest{Node: sidecar(), TypeUrl: resource.ClusterType}) != nil {
				return
			}
			r, err := s.Recv()
			if err != nil {
				return
			}
			flood(s, &discovery.DiscoveryRequest{Node: sidecar(), TypeUrl: resource.ClusterType, ResponseNonce: r.GetNonce(),
				ErrorDetail: &rpcstatus.Status{Code: 3, Message: "rejected"}})
		})
	}},
	{name: "non_reader", shedAs: "send_timeout", run: func(ctx context.Context, h *hostileEnv) {
		// A fixed 64 KiB window: what is not read soon fills it. Each
		// request changes the names, so each answer carries load
		// assignments; none is read. The stream ends when the frontend
		// sheds it (seen on its metric, since this client reads nothing).
		h.streams(ctx, func(sctx context.Context, s sotwStreamClient) {
			before := h.f.shed("send_timeout")
			for i := range 64 {
				names := h.clusters
				if i%2 == 1 {
					names = h.clusters[:1]
				}
				if s.Send(&discovery.DiscoveryRequest{Node: sidecar(), TypeUrl: resource.EndpointType, ResourceNames: names}) != nil {
					return
				}
			}
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for h.f.shed("send_timeout") == before {
				select {
				case <-sctx.Done():
					return
				case <-tick.C:
				}
			}
		}, grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	}},
}

// pushLoad is a frontend with well-behaved clients that ACK everything,
// and a way to push one endpoint change to all of them and time it.
type pushLoad struct {
	f        *frontend
	clusters []string
	conns    []string // the well-behaved clients' connection ids
	round    atomic.Int64
	arrivals chan arrival
	seq      int
}

type arrival struct {
	round int64
	at    time.Time
}

// startPushLoad starts a frontend (stream limits at their defaults, the
// send timeout at 1s) with clients sidecars watching every cluster.
func startPushLoad(ctx context.Context, t testing.TB, clients, services int) *pushLoad {
	t.Helper()
	f := startFrontendTuned(t, meshOf(t, services), func(c *Config) {
		d := DefaultConfig()
		c.MaxResourceNames, c.RequestRate, c.RequestBurst = d.MaxResourceNames, d.RequestRate, d.RequestBurst
		c.NewStreamRate, c.NewStreamBurst = d.NewStreamRate, d.NewStreamBurst
		c.SendTimeout = time.Second
	})
	f.waitApplied(t, uint64(2*services))
	l := &pushLoad{f: f, clusters: clusterNames(services), arrivals: make(chan arrival, 4*clients)}
	for range clients {
		c := dial(ctx, t, f.addr, sidecar())
		c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
		c.send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: l.clusters})
		go func() { // an Envoy: ACK everything
			for {
				r, err := c.stream.Recv()
				if err != nil {
					return
				}
				var names []string
				if r.GetTypeUrl() == resource.EndpointType {
					names = l.clusters
					if n := l.round.Load(); n > 0 && len(r.GetResources()) == 1 {
						l.arrivals <- arrival{round: n, at: time.Now()}
					}
				}
				if c.stream.Send(&discovery.DiscoveryRequest{Node: c.node, TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce(), ResourceNames: names}) != nil {
					return
				}
			}
		}()
	}
	f.waitRegistered(t, clients)
	l.conns = f.connIDs(t)
	return l
}

// push changes one service's endpoints and orders a push to every
// well-behaved client; it returns each client's latency from the order to
// its receipt of the load assignment, and fails if one is not reached.
func (l *pushLoad) push(t testing.TB) []time.Duration {
	t.Helper()
	l.seq++
	seq := l.f.publish(t, pb.Op_OP_UPDATE, "discovery.k8s.io", "EndpointSlice", slice("default", "s007", 8080, fmt.Sprintf("10.200.%d.%d", l.seq/250, l.seq%250+1)))
	l.f.waitApplied(t, seq)
	batch := &pb.PushOrderBatch{Pusher: "bench"}
	for j, id := range l.conns {
		batch.Orders = append(batch.Orders, &pb.PushOrder{ConnId: id, PushId: uint64(l.seq*len(l.conns) + j), ThroughSeq: seq})
	}
	data, _ := proto.Marshal(batch)
	round := l.round.Add(1)
	start := time.Now()
	if err := l.f.nc.PublishMsg(&nats.Msg{Subject: l.f.names.OrdersSubject(l.f.id), Data: data}); err != nil {
		t.Fatal(err)
	}
	timeout := time.NewTimer(testutil.DefaultTimeout)
	defer timeout.Stop()
	var lat []time.Duration
	for len(lat) < len(l.conns) {
		select {
		case a := <-l.arrivals:
			if a.round == round {
				lat = append(lat, a.at.Sub(start))
			}
		case <-timeout.C:
			t.Fatalf("push %d: %d of %d well-behaved clients got it", round, len(lat), len(l.conns))
		}
	}
	return lat
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// runHostiles starts the kinds' loops; the returned stop ends and joins them.
func (l *pushLoad) runHostiles(ctx context.Context, kinds []hostileKind) (stop func()) {
	hctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	h := &hostileEnv{addr: l.f.addr, clusters: l.clusters, f: l.f}
	for _, k := range kinds {
		wg.Go(func() { k.run(hctx, h) })
	}
	return func() { cancel(); wg.Wait() }
}

// BenchmarkHostileClients measures the push latency of 200 well-behaved
// state-of-the-world clients (CDS and EDS of 50 services, ACKing
// everything) on a real frontend over loopback gRPC, from a push order to
// each client's receipt of the changed load assignment: with no hostile
// client, then with each hostile kind running alongside in a loop. It
// reports the p50 and p99 over every client and push, and how many hostile
// streams were shed. Run with -benchtime=100x.
func BenchmarkHostileClients(b *testing.B) {
	kinds := append([]hostileKind{{name: "none"}}, hostileKinds...)
	for _, k := range kinds {
		b.Run(k.name, func(b *testing.B) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			l := startPushLoad(ctx, b, 200, 50)
			var stop func()
			if k.run != nil {
				stop = l.runHostiles(ctx, []hostileKind{k})
				testutil.Eventually(b, k.name+" shed once", func() bool { return l.f.shed(k.shedAs) > 0 })
			}
			var lat []time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				lat = append(lat, l.push(b)...)
			}
			b.StopTimer()
			b.ReportMetric(float64(percentile(lat, 0.50).Microseconds()), "p50-µs")
			b.ReportMetric(float64(percentile(lat, 0.99).Microseconds()), "p99-µs")
			if stop != nil {
				stop()
				b.ReportMetric(l.f.shed(k.shedAs), "shed")
			}
		})
	}
}

// TestHostileClientsDoNotStarveOthers runs every hostile kind at once next
// to 20 well-behaved clients: every push reaches every well-behaved client
// (push fails otherwise), and every hostile kind was shed, by its reason.
// The latency comparison is BenchmarkHostileClients's.
func TestHostileClientsDoNotStarveOthers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l := startPushLoad(ctx, t, 20, 20)
	stop := l.runHostiles(ctx, hostileKinds)
	for _, k := range hostileKinds {
		testutil.Eventually(t, k.name+" shed", func() bool { return l.f.shed(k.shedAs) > 0 })
	}
	for range 10 {
		l.push(t)
	}
	stop()
	if got := l.f.gauge("pilot_xds"); got < float64(len(l.conns)) {
		t.Errorf("%v clients connected, want the %d well-behaved ones still there", got, len(l.conns))
	}
}
