package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	dto "github.com/prometheus/client_model/go"

	"github.com/pilotwire/pilotwire/internal/testkit/adstest"
	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

func scopeService(ns, name string, ports ...int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: Service\nmetadata: {name: %s, namespace: %s}\nspec:\n  clusterIP: 10.96.%d.%d\n  ports:\n", name, ns, len(ns), len(name))
	for _, p := range ports {
		fmt.Fprintf(&b, "  - {name: http-%d, port: %d}\n", p, p)
	}
	return b.String()
}

func scopeSidecar(hosts string) string {
	return "apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: scoped}\nspec:\n  egress:\n  - hosts: " + hosts + "\n"
}

// TestSidecarScopesPushes runs the whole pipeline with a Sidecar limiting
// namespace scoped to its own services. A sidecar there gets no clusters
// of other namespaces, and a change of a service in namespace other sends
// it no response at all: the pusher leaves it out (its scope counter
// moves) while a sidecar in other gets the change. A change in its own
// namespace reaches it, so does a change of its Sidecar, and afterwards
// changes in the namespace the Sidecar now imports.
func TestSidecarScopesPushes(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	dir := t.TempDir()
	pipelinetest.WriteFile(t, dir, "web.yaml", scopeService("scoped", "web", 80))
	pipelinetest.WriteFile(t, dir, "api.yaml", scopeService("other", "api", 80))
	pipelinetest.WriteFile(t, dir, "sidecar.yaml", scopeSidecar(`["./*"]`))
	p := pipelinetest.Start(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()

	// Connect once the frontend's model has every object the pusher has a
	// request for: then each connection's first scope is current.
	p.WaitFor(t, "the model at the latest request", func() bool {
		latest := p.Metric(t, "pusher", "pilotwire_pusher_latest_through_seq")
		return latest >= 3 && p.Metric(t, "fe-0", "pilotwire_ads_applied_seq") >= latest
	})
	connect := func(ns string) *adstest.Client {
		return adstest.Dial(ctx, t, p.ADSAddr, "sidecar~10.244.0.9~client-0."+ns+"~"+ns+".svc.cluster.local")
	}
	clusters := func(resp *discovery.DiscoveryResponse) []string {
		names := keys(adstest.Decode(t, resp, newCluster))
		return slices.DeleteFunc(names, func(n string) bool { return !strings.HasPrefix(n, "outbound|") })
	}
	scoped, observer := connect("scoped"), connect("other")
	got := clusters(scoped.Request(resource.ClusterType))
	if want := []string{"outbound|80||web.scoped.svc.cluster.local"}; !slices.Equal(got, want) {
		t.Fatalf("scoped sidecar's clusters %v, want %v", got, want)
	}
	if got := clusters(observer.Request(resource.ClusterType)); !slices.Contains(got, "outbound|80||api.other.svc.cluster.local") {
		t.Fatalf("observer's clusters %v lack api", got)
	}
	// Both connections are registered with the pusher before any change.
	p.WaitFor(t, "two connections known", func() bool { return p.Metric(t, "pusher", "pilotwire_pusher_connections") == 2 })
	scopeSkips := func() float64 { return labelled(t, p, "pusher", "pilotwire_pusher_skipped_total", "reason", "scope") }
	skipped := scopeSkips()

	// A change in other: the observer sees it; by then the pusher has
	// decided for both connections (in one pass over the request).
	pipelinetest.WriteFile(t, dir, "api.yaml", scopeService("other", "api", 80, 81))
	for seen := false; !seen; {
		seen = slices.Contains(clusters(waitAndAck(ctx, t, observer)), "outbound|81||api.other.svc.cluster.local")
	}
	if got := scopeSkips(); got <= skipped {
		t.Errorf("pusher skipped_total{reason=scope} %v, want above %v: the out-of-scope change was ordered for the scoped sidecar", got, skipped)
	}

	// A change in its own namespace reaches it, and is the first response
	// it gets since its first: the other namespace's change sent nothing.
	pipelinetest.WriteFile(t, dir, "web.yaml", scopeService("scoped", "web", 80, 81))
	want := []string{"outbound|80||web.scoped.svc.cluster.local", "outbound|81||web.scoped.svc.cluster.local"}
	if got := clusters(waitAndAck(ctx, t, scoped)); !slices.Equal(got, want) {
		t.Fatalf("first response after the changes: clusters %v, want %v (a response for the other namespace's change came first?)", got, want)
	}

	// Its Sidecar changes: the new egress reaches it, and so do changes of
	// the namespace it now imports.
	pipelinetest.WriteFile(t, dir, "sidecar.yaml", scopeSidecar(`["./*", "other/*"]`))
	want = []string{"outbound|80||api.other.svc.cluster.local", "outbound|80||web.scoped.svc.cluster.local",
		"outbound|81||api.other.svc.cluster.local", "outbound|81||web.scoped.svc.cluster.local"}
	if got := clusters(waitAndAck(ctx, t, scoped)); !slices.Equal(got, want) {
		t.Fatalf("after the Sidecar change: clusters %v, want %v", got, want)
	}
	pipelinetest.WriteFile(t, dir, "api.yaml", scopeService("other", "api", 80, 81, 82))
	if got := clusters(waitAndAck(ctx, t, scoped)); !slices.Contains(got, "outbound|82||api.other.svc.cluster.local") {
		t.Fatalf("after a change in the imported namespace: clusters %v lack api:82", got)
	}
	if n := p.Metric(t, "fe-0", "pilot_total_xds_rejects"); n != 0 {
		t.Errorf("clients rejected %v responses", n)
	}
}

// waitAndAck receives the next response (of any type), ACKs it and
// returns it.
func waitAndAck(ctx context.Context, t *testing.T, c *adstest.Client) *discovery.DiscoveryResponse {
	t.Helper()
	resp := recvAny(ctx, t, c)
	c.ACK(resp)
	return resp
}

// labelled is the value of the counter name{label=value} of a service.
func labelled(t *testing.T, p *pipelinetest.Pipeline, service, name, label, value string) float64 {
	t.Helper()
	mfs, err := p.Registry(service).Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == label && l.GetValue() == value }) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
