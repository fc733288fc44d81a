package ads

import (
	"context"
	"fmt"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/prometheus/client_golang/prometheus"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// labelled returns the value of the series of metric name whose label has
// value (counters and gauges).
func labelled(g prometheus.Gatherer, name, label, value string) float64 {
	mfs, err := g.Gather()
	if err != nil {
		return 0
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue() + m.GetGauge().GetValue()
				}
			}
		}
	}
	return 0
}

func (f *frontend) shed(reason string) float64 {
	return labelled(f.reg, "pilotwire_ads_streams_shed_total", "reason", reason)
}

// meshOf publishes services s000, s001, ... with ten endpoints each.
func meshOf(t testing.TB, n int) func(*frontend) {
	return func(f *frontend) {
		for i := range n {
			name := fmt.Sprintf("s%03d", i)
			f.publish(t, pb.Op_OP_ADD, "", "Service", service("default", name, 80))
			var addrs []string
			for e := range 10 {
				addrs = append(addrs, fmt.Sprintf("10.%d.0.%d", i, e+1))
			}
			f.publish(t, pb.Op_OP_ADD, "discovery.k8s.io", "EndpointSlice", slice("default", name, 8080, addrs...))
		}
	}
}

func clusterNames(n int) []string {
	var out []string
	for i := range n {
		out = append(out, fmt.Sprintf("outbound|80||s%03d.default.svc.cluster.local", i))
	}
	return out
}

// hostileFrontend is a frontend with the default stream limits (tune may
// change them) serving a mesh of services.
func hostileFrontend(t *testing.T, services int, tune func(*Config)) *frontend {
	t.Helper()
	var seq uint64
	f := startFrontendTuned(t, func(f *frontend) {
		meshOf(t, services)(f)
		seq = uint64(2 * services)
	}, func(c *Config) {
		d := DefaultConfig()
		c.MaxResourceNames, c.RequestRate, c.RequestBurst, c.SendTimeout = d.MaxResourceNames, d.RequestRate, d.RequestBurst, d.SendTimeout
		if tune != nil {
			tune(c)
		}
	})
	f.waitApplied(t, seq)
	return f
}

// recvCode reads until the stream ends and returns its status code.
func recvCode(c *client) codes.Code {
	for {
		if _, err := c.stream.Recv(); err != nil {
			return status.Code(err)
		}
	}
}

func TestHostileNoNode(t *testing.T) {
	f := hostileFrontend(t, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	c := dial(ctx, t, f.addr, nil)
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
	if got := recvCode(c); got != codes.InvalidArgument {
		t.Fatalf("status = %v, want InvalidArgument", got)
	}
	testutil.Eventually(t, "shed{node} counted", func() bool { return f.shed("node") == 1 })
}

func TestHostileTypeURL(t *testing.T) {
	f := hostileFrontend(t, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()

	// A well-formed type this frontend does not serve gets no answer, as
	// with Istio, and the stream goes on.
	c := dial(ctx, t, f.addr, sidecar())
	c.send(&discovery.DiscoveryRequest{TypeUrl: "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"})
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
	if r := c.recv(); r.GetTypeUrl() != resource.ClusterType {
		t.Fatalf("answered %s, want clusters", r.GetTypeUrl())
	}
	if got := labelled(f.reg, "pilotwire_ads_bad_requests_total", "reason", "unsupported_type"); got != 1 {
		t.Errorf("bad_requests{unsupported_type} = %v, want 1", got)
	}

	// A type URL that is not one ends the stream.
	for i, bad := range []string{"clusters", "type.googleapis.com/", string(make([]byte, 300))} {
		c := dial(ctx, t, f.addr, sidecar())
		c.send(&discovery.DiscoveryRequest{TypeUrl: bad})
		if got := recvCode(c); got != codes.InvalidArgument {
			t.Fatalf("type %q: status = %v, want InvalidArgument", bad, got)
		}
		testutil.Eventually(t, "shed{type_url} counted", func() bool { return f.shed("type_url") == float64(i+1) })
	}
}

func TestHostileManyNames(t *testing.T) {
	f := hostileFrontend(t, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	many := make([]string, 100_000)
	for i := range many {
		many[i] = fmt.Sprintf("n%06d", i)
	}
	t.Run("sotw", func(t *testing.T) {
		c := dial(ctx, t, f.addr, sidecar())
		c.send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: many})
		if got := recvCode(c); got != codes.ResourceExhausted {
			t.Fatalf("status = %v, want ResourceExhausted", got)
		}
		testutil.Eventually(t, "shed{too_many_names} counted", func() bool { return f.shed("too_many_names") == 1 })
	})
	t.Run("delta", func(t *testing.T) {
		d := dialDelta(ctx, t, f.addr).stream
		// Within the limit per request, past it in total.
		half := len(many) / 2
		for _, part := range [][]string{many[:half], many[half:]} {
			if err := d.Send(&discovery.DeltaDiscoveryRequest{Node: sidecar(), TypeUrl: resource.EndpointType, ResourceNamesSubscribe: part}); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		for err == nil {
			_, err = d.Recv()
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("status = %v, want ResourceExhausted", err)
		}
		testutil.Eventually(t, "shed{too_many_names} counted", func() bool { return f.shed("too_many_names") == 2 })
	})
}

func TestHostileNonces(t *testing.T) {
	f := hostileFrontend(t, 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	c := dial(ctx, t, f.addr, sidecar())
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: clusterNames(1)})
	first := c.recv()
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: clusterNames(2), ResponseNonce: first.GetNonce()})
	second := c.recv()

	// A stale nonce (sent before, superseded) is ignored and counted.
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: clusterNames(1), ResponseNonce: first.GetNonce()})
	testutil.Eventually(t, "expired nonce counted", func() bool { return f.gauge("pilot_xds_expired_nonce") == 1 })
	// The stream is still served: an ACK of the latest is taken.
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: clusterNames(2), ResponseNonce: second.GetNonce(), VersionInfo: second.GetVersionInfo()})

	// A nonce this stream never sent is a forgery: the stream ends.
	for _, forged := range []string{"forged", second.GetNonce() + "0", "fe-1-99-1"} {
		c := dial(ctx, t, f.addr, sidecar())
		c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
		c.recv()
		c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: forged})
		if got := recvCode(c); got != codes.InvalidArgument {
			t.Fatalf("nonce %q: status = %v, want InvalidArgument", forged, got)
		}
	}
	testutil.Eventually(t, "shed{forged_nonce} counted", func() bool { return f.shed("forged_nonce") == 3 })
	if got := f.gauge("pilot_xds_expired_nonce"); got != 1 {
		t.Errorf("expired nonces = %v, want 1 (forgeries are not stale)", got)
	}
}

func TestHostileNACKStorm(t *testing.T) {
	f := hostileFrontend(t, 1, func(c *Config) { c.RequestRate, c.RequestBurst = 10, 200 })
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	c := dial(ctx, t, f.addr, sidecar())
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
	r := c.recv()
	nack := &discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: r.GetNonce(), ErrorDetail: &rpcstatus.Status{Code: 3, Message: "storm"}}
	stormErr := make(chan error, 1)
	go func() {
		for {
			nack.Node = c.node
			if err := c.stream.Send(nack); err != nil {
				stormErr <- err
				return
			}
		}
	}()
	if got := recvCode(c); got != codes.ResourceExhausted {
		t.Fatalf("status = %v, want ResourceExhausted", got)
	}
	<-stormErr
	testutil.Eventually(t, "shed{request_rate} counted", func() bool { return f.shed("request_rate") == 1 })
	// One rejection, however often it was repeated: one warning, one
	// delivery record.
	if got := f.gauge("pilot_total_xds_rejects"); got != 1 {
		t.Errorf("rejects = %v, want 1", got)
	}
	if got := labelled(f.reg, "pilotwire_ads_bad_requests_total", "reason", "repeated_nack"); got < 1 {
		t.Errorf("bad_requests{repeated_nack} = %v, want > 0", got)
	}
}

func TestHostileNonReader(t *testing.T) {
	const services = 200
	f := hostileFrontend(t, services, func(c *Config) { c.SendTimeout = 300 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	// A fixed 64 KiB window (no BDP growth): what the client does not read
	// soon fills it.
	cc, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	st, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	all := clusterNames(services)
	// Each request changes the names, so each is answered with every load
	// assignment (about 90 KB); none is read.
	for i := range 8 {
		names := all
		if i%2 == 1 {
			names = all[:1]
		}
		if err := st.Send(&discovery.DiscoveryRequest{Node: sidecar(), TypeUrl: resource.EndpointType, ResourceNames: names}); err != nil {
			break // the stream already ended
		}
	}
	testutil.Eventually(t, "non-reading stream shed", func() bool { return f.shed("send_timeout") == 1 })
	testutil.Eventually(t, "connection gone", func() bool { return f.gauge("pilot_xds") == 0 })
	var err2 error
	for err2 == nil {
		_, err2 = st.Recv()
	}
	if status.Code(err2) != codes.DeadlineExceeded {
		t.Fatalf("status = %v, want DeadlineExceeded", err2)
	}
}
