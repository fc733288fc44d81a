package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/pilotwire/pilotwire/internal/testkit/adstest"
	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/services/ingest"
)

// replayNodes are the proxies compared: a sidecar with inbound config and
// one in another namespace.
var replayNodes = []string{adstest.WebNode, "sidecar~10.244.0.11~echo-0.default~default.svc.cluster.local"}

// proxyConfig subscribes a raw ADS client to CDS, EDS, LDS and RDS, as an
// Envoy does, and returns the four responses.
func proxyConfig(ctx context.Context, t *testing.T, addr, node string) []*discovery.DiscoveryResponse {
	t.Helper()
	c := adstest.Dial(ctx, t, addr, node)
	cds := c.Request(resource.ClusterType)
	eds := c.Request(resource.EndpointType, adstest.EDSNames(t, cds)...)
	lds := c.Request(resource.ListenerType)
	rds := c.Request(resource.RouteType, adstest.RDSNames(t, lds)...)
	return []*discovery.DiscoveryResponse{cds, eds, lds, rds}
}

// TestReplayIntoFreshStack: a recorded history replayed up to a point into
// a fresh stack gives raw ADS clients the resources and versions, byte for
// byte, that the original gave them at that point, although the original
// has moved on since.
func TestReplayIntoFreshStack(t *testing.T) {
	p, dir, cc, s := startMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	want := make(map[string][]*discovery.DiscoveryResponse)
	var at uint64
	for _, node := range replayNodes {
		want[node] = proxyConfig(ctx, t, p.ADSAddr, node)
		for _, r := range want[node] {
			seq := responseSeq(ctx, t, s, r.GetNonce())
			if at != 0 && seq != at {
				t.Fatalf("%s %s generated at seq %d, others at %d: the mesh changed under the test", node, r.GetTypeUrl(), seq, at)
			}
			at = seq
		}
	}
	// The original moves on.
	pipelinetest.WriteFile(t, dir, "echo-slice.yaml", adstest.EchoSlice("echo-1", []string{"10.244.0.11", "10.244.0.12", "10.244.0.13"}))
	testutil.Eventually(t, "the endpoint change on the stream", func() bool { return lastSeq(ctx, t, s) > at })

	// A fresh stack whose ingest owns a cluster of its own, with nothing in it.
	fresh := pipelinetest.Start(t, t.TempDir(), pipelinetest.Options{Ingest: func(c *ingest.Config) { c.FileClusterID = "replay" }})
	var out bytes.Buffer
	rc := replayConfig{connConfig: cc, To: itoa(at), Into: fresh.URL}
	rc.Output = "json"
	if err := runReplay(ctx, &out, rc); err != nil {
		t.Fatal(err)
	}
	var res replayResult
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if res.Through != at || res.Records == 0 {
		t.Fatalf("replay copied %+v, want through seq %d", res, at)
	}
	fresh.WaitFor(t, "the copy applied by the fresh frontend", func() bool {
		return fresh.Metric(t, "fe-0", "pilotwire_ads_applied_seq") >= float64(res.TargetLast)
	})
	for _, node := range replayNodes {
		got := proxyConfig(ctx, t, fresh.ADSAddr, node)
		for i, w := range want[node] {
			g := got[i]
			if g.GetVersionInfo() != w.GetVersionInfo() {
				t.Errorf("%s %s: the copy sent version %s, the original %s", node, w.GetTypeUrl(), g.GetVersionInfo(), w.GetVersionInfo())
			}
			if len(g.GetResources()) != len(w.GetResources()) || len(w.GetResources()) == 0 {
				t.Errorf("%s %s: the copy sent %d resources, the original %d", node, w.GetTypeUrl(), len(g.GetResources()), len(w.GetResources()))
				continue
			}
			for j := range w.GetResources() {
				if !bytes.Equal(g.GetResources()[j].GetValue(), w.GetResources()[j].GetValue()) {
					t.Errorf("%s %s: resource %d differs", node, w.GetTypeUrl(), j)
				}
			}
		}
	}

	// Into a deployment that already has a history: refused.
	if err := runReplay(ctx, &out, rc); err == nil {
		t.Errorf("a second replay into the same deployment succeeded")
	}
}
