package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pilotwire/pilotwire/internal/testkit/adstest"
	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
)

// envoyClient is a raw state-of-the-world ADS client that behaves like an
// Envoy sidecar: CDS wildcard, EDS for the clusters it gets, every response
// ACKed, and it remembers the version it has of each type. It can move to
// another frontend presenting the versions it has.
type envoyClient struct {
	t    *testing.T
	node *core.Node

	mu        sync.Mutex
	versions  map[string]string // type -> version it has
	endpoints map[string][]string
	responses int // responses received on the current stream
	conn      *grpc.ClientConn
	cancel    context.CancelFunc
	done      chan struct{}
}

func newEnvoyClient(t *testing.T, i int) *envoyClient {
	return &envoyClient{t: t, versions: map[string]string{}, endpoints: map[string][]string{},
		node: &core.Node{Id: fmt.Sprintf("sidecar~10.1.%d.%d~c%d.default~default.svc.cluster.local", i/250, i%250, i)}}
}

// connect opens a stream to addr and runs the client until it ends.
func (c *envoyClient) connect(addr string) {
	c.t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		c.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	c.mu.Lock()
	c.conn, c.cancel, c.done, c.responses = cc, cancel, make(chan struct{}), 0
	cdsVersion := c.versions[resource.ClusterType]
	edsVersion := c.versions[resource.EndpointType]
	var edsNames []string
	for n := range c.endpoints {
		edsNames = append(edsNames, n)
	}
	done := c.done
	c.mu.Unlock()
	send := func(r *discovery.DiscoveryRequest) error { r.Node = c.node; return stream.Send(r) }
	// A reconnect presents what it has, as Envoy does.
	_ = send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: cdsVersion})
	if len(edsNames) > 0 {
		_ = send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, VersionInfo: edsVersion, ResourceNames: edsNames})
	}
	go func() {
		defer close(done)
		for {
			resp, err := stream.Recv()
			if err != nil {
				return
			}
			var names []string
			c.mu.Lock()
			c.responses++
			c.versions[resp.GetTypeUrl()] = resp.GetVersionInfo()
			switch resp.GetTypeUrl() {
			case resource.ClusterType:
				for _, a := range resp.GetResources() {
					cl := &cluster.Cluster{}
					if a.UnmarshalTo(cl) == nil {
						names = append(names, cl.GetName())
					}
				}
			case resource.EndpointType:
				for name, eps := range adstest.EndpointsOf(resp) {
					c.endpoints[name] = eps
				}
				for n := range c.endpoints {
					names = append(names, n)
				}
			}
			c.mu.Unlock()
			_ = send(&discovery.DiscoveryRequest{TypeUrl: resp.GetTypeUrl(), VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(), ResourceNames: names})
			if resp.GetTypeUrl() == resource.ClusterType {
				_ = send(&discovery.DiscoveryRequest{TypeUrl: resource.EndpointType, ResourceNames: names})
			}
		}
	}()
}

func (c *envoyClient) close() {
	c.mu.Lock()
	cancel, cc, done := c.cancel, c.conn, c.done
	c.mu.Unlock()
	cancel()
	cc.Close()
	<-done
}

func (c *envoyClient) state() (cds, eds string, responses int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.versions[resource.ClusterType], c.versions[resource.EndpointType], c.responses
}

func (c *envoyClient) endpointsOf(name string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.endpoints[name]...)
}

// converged reports whether every client has the same CDS and EDS versions
// and, if want is set, the endpoints want for cluster name.
func converged(clients []*envoyClient, name string, want []string) bool {
	cds0, eds0, _ := clients[0].state()
	if cds0 == "" || eds0 == "" {
		return false
	}
	for _, c := range clients {
		cds, eds, _ := c.state()
		if cds != cds0 || eds != eds0 {
			return false
		}
		if want != nil && strings.Join(c.endpointsOf(name), ",") != strings.Join(want, ",") {
			return false
		}
	}
	return true
}

// TestTwoFrontendsOneCrashes: 200 clients spread over two frontends converge
// to identical versions; one frontend crashes; its connections leave the
// registry within the frontend timeout; its clients reconnect to the other
// frontend presenting their versions and are sent nothing; the next change
// reaches all 200.
func TestTwoFrontendsOneCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := t.TempDir()
	pipelinetest.WriteFile(t, dir, "mesh.yaml", meshYAML)
	pipelinetest.WriteFile(t, dir, "echo-slice.yaml", echoSlice("10.244.0.11"))
	pipelinetest.WriteFile(t, dir, "web-slice.yaml", adstest.WebSlice)
	p := pipelinetest.Start(t, dir, pipelinetest.Options{Frontends: 2, FrontendTimeout: time.Second})
	const echo = "outbound|8080||echo.default.svc.cluster.local"

	var clients []*envoyClient
	for i := range 200 {
		c := newEnvoyClient(t, i)
		c.connect(p.ADSAddrs[i%2])
		clients = append(clients, c)
	}
	defer func() {
		for _, c := range clients {
			c.close()
		}
	}()
	p.WaitFor(t, "200 clients converged over two frontends", func() bool { return converged(clients, echo, []string{"10.244.0.11:9080"}) })

	pipelinetest.WriteFile(t, dir, "echo-slice.yaml", echoSlice("10.244.0.12"))
	p.WaitFor(t, "the change reached both frontends' clients", func() bool { return converged(clients, echo, []string{"10.244.0.12:9080"}) })

	// fe-0 crashes: no goodbye in the registry.
	p.Crash(0)
	_, js := natstest.Connect(t, p.URL)
	names, _ := bus.NewNames("pw")
	p.WaitFor(t, "fe-0's connections gone from the registry", func() bool { return registryConns(t, js, names, "fe-0") == 0 })

	// Its clients move to fe-1 with the versions they have: nothing is sent.
	for i := 0; i < len(clients); i += 2 {
		clients[i].close()
		clients[i].connect(p.ADSAddrs[1])
	}
	p.WaitFor(t, "moved clients registered on fe-1", func() bool { return registryConns(t, js, names, "fe-1") == 200 })
	for i := 0; i < len(clients); i += 2 {
		if _, _, n := clients[i].state(); n != 0 {
			t.Fatalf("client %d was sent %d responses on reconnecting with current versions, want 0", i, n)
		}
	}

	pipelinetest.WriteFile(t, dir, "echo-slice.yaml", echoSlice("10.244.0.13"))
	p.WaitFor(t, "the next change reached all 200 on fe-1", func() bool { return converged(clients, echo, []string{"10.244.0.13:9080"}) })
}

// registryConns counts the registry's connections of one frontend.
func registryConns(t *testing.T, js jetstream.JetStream, names bus.Names, fe string) int {
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	kv, err := js.KeyValue(ctx, names.RegistryBucket())
	if err != nil {
		return -1
	}
	lister, err := kv.ListKeysFiltered(ctx, "conn."+fe+".>")
	if err != nil {
		return -1
	}
	n := 0
	for range lister.Keys() {
		n++
	}
	return n
}

// TestSlowClient: a client that stops reading while 200 changes happen is
// sent at most two more load assignments when it resumes, ending with the
// final state, while another client converges meanwhile.
func TestSlowClient(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := t.TempDir()
	pipelinetest.WriteFile(t, dir, "mesh.yaml", meshYAML)
	pipelinetest.WriteFile(t, dir, "echo-slice.yaml", echoSlice("10.250.0.0"))
	p := pipelinetest.Start(t, dir)
	const echo = "outbound|8080||echo.default.svc.cluster.local"
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()

	slow := adstest.Dial(ctx, t, p.ADSAddr, adstest.ClientNode)
	eds := slow.Request(resource.EndpointType, echo) // subscribed and ACKed; now it stops reading

	fast := newEnvoyClient(t, 1)
	fast.connect(p.ADSAddr)
	defer fast.close()

	// 200 changes: 200 more EndpointSlices of echo, one endpoint each, so
	// that no coalescing at the source can hide them.
	want := []string{"10.250.0.0:9080"}
	for i := range 200 {
		addr := fmt.Sprintf("10.250.%d.%d", i/100+1, i%100+1)
		want = append(want, addr+":9080")
		pipelinetest.WriteFile(t, dir, fmt.Sprintf("echo-slice-%03d.yaml", i), echoSliceNamed(fmt.Sprintf("echo-x%03d", i), addr))
	}
	sort.Strings(want)
	p.WaitFor(t, "the fast client at the final state", func() bool {
		return strings.Join(fast.endpointsOf(echo), ",") == strings.Join(want, ",")
	})
	if got := p.Metric(t, "ingest", "pilotwire_ingest_records_published_total"); got < 202 {
		t.Fatalf("%v change records published, want the 2 initial and 200 more", got)
	}

	// The slow client resumes: a stale response at most, then the final one.
	for n := 1; ; n++ {
		r := slow.RecvType(resource.EndpointType)
		slow.ACK(r, echo)
		got := adstest.EndpointsOf(r)[echo]
		if strings.Join(got, ",") == strings.Join(want, ",") {
			if n > 2 {
				t.Errorf("slow client got %d responses after resuming, want at most 2", n)
			}
			break
		}
		if n >= 2 {
			t.Fatalf("slow client's response %d has %d endpoints, want the final %d", n, len(got), len(want))
		}
	}
	if eds.GetVersionInfo() == "" {
		t.Fatal("no initial EDS")
	}
}
