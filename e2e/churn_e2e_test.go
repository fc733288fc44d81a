package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/debounce"
	"github.com/pilotwire/pilotwire/pkg/meshconfig"
	"github.com/pilotwire/pilotwire/pkg/model"
	"github.com/pilotwire/pilotwire/pkg/nodeid"
	"github.com/pilotwire/pilotwire/pkg/xdsgen"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// The churn's shape. Rounds of: every Pod relabelled (podsPerService ×
// baseServices Pod updates), every extra slice of the base services
// changed (slicesPerService-1 per service), newPerRound new services
// (a Service and its slice each).
const (
	churnNS          = "churn"
	baseServices     = 100
	podsPerService   = 20
	slicesPerService = 5 // slice 0 names the Pods; the others hold one endpoint each
	newPerRound      = 50
	churnRounds      = 4
)

func churnService(i int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata: {name: s%d, namespace: churn}
spec:
  clusterIP: 10.97.%d.%d
  ports:
  - {name: http, port: 80, targetPort: 8080}
`, i, i/250, i%250+1)
}

// churnRule splits a base service into subsets by the Pods' generation
// label, so every relabel moves endpoints between load assignments.
func churnRule(i int) string {
	return fmt.Sprintf(`apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: s%d, namespace: churn}
spec:
  host: s%d
  subsets:
  - {name: g2, labels: {gen: g2}}
  - {name: g4, labels: {gen: g4}}
`, i, i)
}

// churnPods are the Pods behind base service i at generation gen.
func churnPods(i, gen int) string {
	var b strings.Builder
	for j := range podsPerService {
		fmt.Fprintf(&b, `apiVersion: v1
kind: Pod
metadata: {name: s%d-p%d, namespace: churn, labels: {app: s%d, gen: g%d}}
status: {podIP: 10.240.%d.%d}
---
`, i, j, i, gen, i, j+1)
	}
	return b.String()
}

// churnSlice is slice k of service i at round r: slice 0 names the Pods,
// the others hold one endpoint whose address moves every round.
func churnSlice(i, k, r int) string {
	var b strings.Builder
	fmt.Fprintf(&b, `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: s%d-%d, namespace: churn, labels: {kubernetes.io/service-name: s%d}}
addressType: IPv4
ports:
- {name: http, port: 8080}
endpoints:
`, i, k, i)
	if k == 0 {
		for j := range podsPerService {
			fmt.Fprintf(&b, "- {addresses: [\"10.240.%d.%d\"], targetRef: {kind: Pod, namespace: churn, name: s%d-p%d}}\n", i, j+1, i, j)
		}
		return b.String()
	}
	fmt.Fprintf(&b, "- {addresses: [\"10.241.%d.%d\"]}\n", i, k*50+r)
	return b.String()
}

// churnMesh writes the initial mesh and returns how many records it makes.
func churnMesh(t *testing.T, dir string) int {
	for i := range baseServices {
		pipelinetest.WriteFile(t, dir, fmt.Sprintf("s%d.yaml", i), churnService(i)+"---\n"+churnRule(i))
		pipelinetest.WriteFile(t, dir, fmt.Sprintf("s%d-pods.yaml", i), churnPods(i, 0))
		for k := range slicesPerService {
			pipelinetest.WriteFile(t, dir, fmt.Sprintf("s%d-slice-%d.yaml", i, k), churnSlice(i, k, 0))
		}
	}
	return baseServices * (2 + podsPerService + slicesPerService)
}

// churnRound writes round r (1-based) and returns its counts of records.
func churnRound(t *testing.T, dir string, r int) (pods, endpoints, services int) {
	for i := range baseServices {
		pipelinetest.WriteFile(t, dir, fmt.Sprintf("s%d-pods.yaml", i), churnPods(i, r))
		pods += podsPerService
		for k := 1; k < slicesPerService; k++ {
			pipelinetest.WriteFile(t, dir, fmt.Sprintf("s%d-slice-%d.yaml", i, k), churnSlice(i, k, r))
			endpoints++
		}
	}
	for n := range newPerRound {
		i := baseServices + (r-1)*newPerRound + n
		pipelinetest.WriteFile(t, dir, fmt.Sprintf("s%d.yaml", i), churnService(i)+"---\n"+churnSlice(i, 1, r))
		services += 2
	}
	return pods, endpoints, services
}

// churnResult is what a churn run measured.
type churnResult struct {
	changes, pods, endpoints, services int
	pushRequests, orders, responses    float64
}

// runChurn runs the whole pipeline with EDS debounce on or off, connects
// clients (state of the world and delta, on two frontends), applies the
// churn and waits until every client holds exactly what a fresh render of
// the final model gives its proxy.
func runChurn(tt *testing.T, edsDebounce bool) churnResult {
	dir := tt.TempDir()
	initial := churnMesh(tt, dir)
	p := pipelinetest.Start(tt, dir, pipelinetest.Options{
		Frontends: 2,
		Debounce:  func(c *debounce.Config) { c.EnableEDSDebounce = edsDebounce },
	})
	// Records on the change stream: ingest's own counter restarts its
	// count when a loaded machine makes it lose and retake its lease.
	_, js := natstest.Connect(tt, p.URL)
	names, err := bus.NewNames("pw")
	if err != nil {
		tt.Fatal(err)
	}
	published := func() float64 {
		ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
		defer cancel()
		st, err := js.Stream(ctx, names.ChangesStream())
		if err != nil {
			tt.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			tt.Fatal(err)
		}
		return float64(info.State.Msgs)
	}
	waitProgress(tt, "the initial mesh published", published, func() bool { return published() >= float64(initial) })
	var clients []*meshClient
	for i, delta := range []bool{false, true, false, true} {
		id := fmt.Sprintf("sidecar~10.9.0.%d~client-%d.default~default.svc.cluster.local", i+1, i)
		clients = append(clients, startMeshClient(context.Background(), tt, p.ADSAddrs[i%2], id, delta))
	}

	res := churnResult{}
	want := initial
	for r := 1; r <= churnRounds; r++ {
		pods, eps, svcs := churnRound(tt, dir, r)
		res.pods += pods
		res.endpoints += eps
		res.services += svcs
		want += pods + eps + svcs
		// Each file is written once a round, so no coalescing at the source
		// can hide a change: the count is exact.
		waitProgress(tt, fmt.Sprintf("round %d published", r), published, func() bool { return published() >= float64(want) })
	}
	res.changes = res.pods + res.endpoints + res.services
	if got := published(); got != float64(want) {
		tt.Fatalf("%v records published, want %d", got, want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	final := renderFinal(ctx, tt, p.URL, clients)
	// Compare a client again only once it got another response.
	seen := make([]int, len(clients))
	done := make([]bool, len(clients))
	responses := func() float64 {
		n := 0
		for _, c := range clients {
			n += c.responseCount()
		}
		return float64(n)
	}
	waitProgress(tt, "every client on the final configuration", responses, func() bool {
		all := true
		for i, c := range clients {
			if n := c.responseCount(); !done[i] && n != seen[i] {
				seen[i] = n
				got, _, err := c.state()
				if err != nil {
					tt.Fatalf("client %s: %v", c.node.GetId(), err)
				}
				done[i] = got.equal(final[c.node.GetId()])
			}
			all = all && done[i]
		}
		return all
	})
	for i, c := range clients {
		// Nothing more may come once a client holds the final state.
		if got, _, _ := c.state(); !got.equal(final[c.node.GetId()]) {
			tt.Errorf("client %d moved off the final configuration: %s", i, cmp.Diff(final[c.node.GetId()], got))
		}
	}
	for _, c := range clients {
		_, n, _ := c.state()
		res.responses += float64(n)
	}
	res.pushRequests = p.Metric(tt, "debouncer", "pilotwire_debounce_push_requests_total")
	res.orders = p.Metric(tt, "pusher", "pilotwire_pusher_orders_total")
	for _, fe := range []string{"fe-0", "fe-1"} {
		if n := p.Metric(tt, fe, "pilot_total_xds_rejects"); n != 0 {
			tt.Errorf("%s: %v rejects", fe, n)
		}
	}
	return res
}

// waitProgress polls cond until it holds, failing the test once progress
// has not moved for testutil.DefaultTimeout: on a loaded machine the churn
// may take longer than one timeout, but it never stands still that long.
func waitProgress(t *testing.T, what string, progress func() float64, cond func() bool) {
	t.Helper()
	deadline := time.NewTimer(testutil.DefaultTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	last := progress()
	for !cond() {
		select {
		case <-deadline.C:
			t.Fatalf("waiting for %s: no progress for %v (at %v)", what, testutil.DefaultTimeout, last)
		case <-tick.C:
			if n := progress(); n != last {
				last = n
				deadline.Reset(testutil.DefaultTimeout)
			}
		}
	}
}

// renderFinal replays the whole change stream into a fresh model, as
// `pilotwire render` does, and renders each client's proxy with the
// frontends' generator: CDS and LDS in full, EDS and RDS what the clusters
// and listeners name.
func renderFinal(ctx context.Context, t *testing.T, url string, clients []*meshClient) map[string]holding {
	t.Helper()
	_, js := natstest.Connect(t, url)
	names, err := bus.NewNames("pw")
	if err != nil {
		t.Fatal(err)
	}
	store := model.NewStore()
	for _, msg := range natstest.ReadStream(t, js, names.ChangesStream()) {
		seq := msg.Sequence
		rec := &pb.ChangeRecord{}
		if err := proto.Unmarshal(msg.Data, rec); err != nil {
			t.Fatalf("record %d: %v", seq, err)
		}
		if err := store.Apply(rec, seq); err != nil && !errors.Is(err, model.ErrAlreadyApplied) {
			t.Fatalf("apply %d: %v", seq, err)
		}
	}
	mesh := store.Snapshot()
	mc, err := meshconfig.Load("")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]holding{}
	for _, c := range clients {
		px, err := nodeid.Parse(&core.Node{Id: c.node.GetId()})
		if err != nil {
			t.Fatal(err)
		}
		out[c.node.GetId()] = renderHolding(t, mesh, px.XDS(mc))
	}
	return out
}

func renderHolding(t *testing.T, mesh *model.Mesh, px xdsgen.Proxy) holding {
	t.Helper()
	h := holding{}
	var refs []string
	for _, ty := range xdsTypes {
		set, err := xdsgen.GenerateFor(mesh, px, ty)
		if err != nil {
			t.Fatal(err)
		}
		rs := set.Resources
		if ty == resource.EndpointType || ty == resource.RouteType {
			rs, _ = set.Select(refs)
			if len(refs) == 0 {
				rs = nil
			}
		}
		h[ty] = map[string]string{}
		refs = nil
		for _, r := range rs {
			if v, ok := r.Msg.(interface{ ValidateAll() error }); ok {
				if err := v.ValidateAll(); err != nil {
					t.Errorf("invalid %s %s: %v", ty, r.Name, err)
				}
			}
			h[ty][r.Name] = contentHash(r.Any)
			refs = append(refs, refsOf(r.Msg)...)
		}
	}
	return h
}

// TestChurnConverges (issue 12, "done means"): the whole pipeline on
// embedded JetStream, EDS debounce on and off, under a churn of 2,000
// service and endpoint changes and 8,000 Pod updates; two state-of-the-world
// and two delta clients on two frontends end on exactly the configuration a
// fresh render of the final model gives them.
func TestChurnConverges(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	for _, eds := range []bool{true, false} {
		t.Run(fmt.Sprintf("eds_debounce=%v", eds), func(t *testing.T) {
			r := runChurn(t, eds)
			if r.services+r.endpoints != 2000 || r.pods != 8000 {
				t.Fatalf("churn of %d services, %d endpoint changes, %d pod updates: want 2,000 and 8,000", r.services, r.endpoints, r.pods)
			}
			t.Logf("eds_debounce=%v: %d changes (%d service, %d endpoint, %d pod), %v PushRequests, %v push orders, %v responses to 4 clients",
				eds, r.changes, r.services, r.endpoints, r.pods, r.pushRequests, r.orders, r.responses)
		})
	}
}
