package ads

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sort"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/svc"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// nats.go's own leak on an object store Put (natstest.UpstreamLeaks) is
// ignored; every other goroutine is checked.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, natstest.UpstreamLeaks()...) }

// frontend is one ADS frontend on embedded JetStream, fed by change records
// the test publishes itself.
type frontend struct {
	stop  context.CancelFunc // begins the frontend's shutdown (drain)
	http  string             // base URL of /debug, /metrics
	url   string
	id    string
	addr  string
	nc    *nats.Conn
	js    jetstream.JetStream
	names bus.Names
	reg   *prometheus.Registry
}

// startFrontend starts the frontend after pre has published the initial
// records, so the frontend serves once its model holds them.
func startFrontend(t testing.TB, pre func(*frontend)) *frontend {
	t.Helper()
	return startFrontendTuned(t, pre, nil)
}

// startFrontendTuned is startFrontend with tune applied to the config.
func startFrontendTuned(t testing.TB, pre func(*frontend), tune func(*Config)) *frontend {
	t.Helper()
	url := natstest.Start(t)
	_, js := natstest.Connect(t, url)
	names, _ := bus.NewNames("pw")
	f := &frontend{js: js, names: names}
	sctx, scancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer scancel()
	if _, err := bus.EnsureStream(sctx, js, names.ChangesConfig(bus.StreamOptions{})); err != nil {
		t.Fatal(err)
	}
	if pre != nil {
		pre(f)
	}
	return runFrontend(t, url, "fe-1", tune)
}

// runFrontend runs one more frontend on the NATS server at url.
func runFrontend(t testing.TB, url, id string, tune func(*Config)) *frontend {
	t.Helper()
	nc, js := natstest.Connect(t, url)
	names, _ := bus.NewNames("pw")
	f := &frontend{url: url, id: id, nc: nc, js: js, names: names, reg: prometheus.NewRegistry()}
	cfg := Config{
		Common:           svc.Common{NATSURL: url, Prefix: "pw"},
		ADSAddr:          "127.0.0.1:0",
		FrontendID:       id,
		MaxConnectionAge: time.Hour,
		OnListen:         func(a string) { f.addr = a },
	}
	if tune != nil {
		tune(&cfg)
	}
	addr := make(chan string, 1)
	onListen := cfg.OnListen
	cfg.OnListen = func(a string) { onListen(a); addr <- a }
	ctx, cancel := context.WithCancel(context.Background())
	health := &svc.Health{}
	hs := svc.NewHTTPServer("127.0.0.1:0", f.reg, health, slog.New(slog.DiscardHandler))
	if err := hs.Listen(); err != nil {
		t.Fatal(err)
	}
	f.http = "http://" + hs.Addr()
	errc := make(chan error, 2)
	go func() { errc <- hs.Serve(ctx) }()
	go func() {
		errc <- Run(ctx, cfg, svc.Deps{NC: nc, JS: js, Log: slog.New(slog.DiscardHandler), Reg: f.reg, Health: health, HTTP: hs, Debug: hs})
	}()
	f.stop = cancel
	t.Cleanup(func() {
		cancel()
		for range 2 {
			err, ok := testutil.Stopped(t, errc, "the frontend's Run or its HTTP server")
			if !ok {
				break
			}
			if err != nil {
				t.Errorf("Run() = %v", err)
			}
		}
	})
	select {
	case <-addr:
	case err := <-errc:
		errc <- err // the cleanup waits for both results
		t.Fatalf("Run() = %v", err)
	}
	return f
}

// publish writes one change record of a Kubernetes object.
func (f *frontend) publish(t testing.TB, op pb.Op, group, kind string, obj map[string]any) uint64 {
	t.Helper()
	md := obj["metadata"].(map[string]any)
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	rec := &pb.ChangeRecord{
		Cluster: "c1", Op: op, Object: b, Uid: fmt.Sprint(md["name"]), ResourceVersion: fmt.Sprint(time.Now().UnixNano()),
		Ref: &pb.ObjectRef{Group: group, Kind: kind, Namespace: md["namespace"].(string), Name: md["name"].(string)},
	}
	data, _ := proto.Marshal(rec)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	ack, err := f.js.Publish(ctx, f.names.ChangeSubject("c1", rec.Ref), data)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

func service(ns, name string, port int) map[string]any {
	return map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"clusterIP": "10.96.0.9", "ports": []any{map[string]any{"name": "http", "port": port}}},
	}
}

func slice(ns, svcName string, port int, addrs ...string) map[string]any {
	var eps []any
	for _, a := range addrs {
		eps = append(eps, map[string]any{"addresses": []any{a}})
	}
	return map[string]any{
		"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
		"metadata":    map[string]any{"name": svcName + "-1", "namespace": ns, "labels": map[string]any{"kubernetes.io/service-name": svcName}},
		"addressType": "IPv4",
		"ports":       []any{map[string]any{"name": "http", "port": port}},
		"endpoints":   eps,
	}
}

type client struct {
	cc     *grpc.ClientConn
	t      testing.TB
	stream grpc.BidiStreamingClient[discovery.DiscoveryRequest, discovery.DiscoveryResponse]
	node   *core.Node
}

func dial(ctx context.Context, t testing.TB, addr string, node *core.Node) *client {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	s, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &client{t: t, stream: s, node: node, cc: cc}
}

func sidecar() *core.Node {
	return &core.Node{Id: "sidecar~10.0.0.1~a-0.default~default.svc.cluster.local"}
}

func (c *client) send(r *discovery.DiscoveryRequest) {
	c.t.Helper()
	r.Node = c.node
	if err := c.stream.Send(r); err != nil {
		c.t.Fatal(err)
	}
}

func (c *client) recv() *discovery.DiscoveryResponse {
	c.t.Helper()
	r, err := c.stream.Recv()
	if err != nil {
		c.t.Fatalf("recv: %v", err)
	}
	return r
}

func names(r *discovery.DiscoveryResponse) []string {
	var out []string
	for _, a := range r.GetResources() {
		m, err := a.UnmarshalNew()
		if err != nil {
			panic(err)
		}
		out = append(out, cache.GetResourceName(m))
	}
	sort.Strings(out)
	return out
}

func TestFirstRequestNeedsNodeID(t *testing.T) {
	f := startFrontend(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	c := dial(ctx, t, f.addr, &core.Node{})
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
	_, err := c.stream.Recv()
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Recv() error = %v, want InvalidArgument", err)
	}
}

func TestUnknownGeneratorRejected(t *testing.T) {
	f := startFrontend(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	md, _ := structpb.NewStruct(map[string]any{"GENERATOR": "bogus"})
	c := dial(ctx, t, f.addr, &core.Node{Id: "x", Metadata: md})
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
	if _, err := c.stream.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("Recv() error = %v, want InvalidArgument", err)
	}
}

// waitApplied polls the frontend's applied-sequence gauge until it reaches seq.
func (f *frontend) waitApplied(t testing.TB, seq uint64) {
	t.Helper()
	testutil.Eventually(t, fmt.Sprintf("model applied seq %d", seq), func() bool { return f.gauge("pilotwire_ads_applied_seq") >= float64(seq) })
}

func (f *frontend) gauge(name string) float64 { return testutil.Metric(f.reg, name) }
