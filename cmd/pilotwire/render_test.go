package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/adstest"
	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// startMesh runs the pipeline on the test mesh and returns it with a
// session on its NATS.
func startMesh(t *testing.T) (*pipelinetest.Pipeline, string, connConfig, *session) {
	t.Helper()
	dir := t.TempDir()
	pipelinetest.WriteFile(t, dir, "mesh.yaml", adstest.MeshYAML)
	pipelinetest.WriteFile(t, dir, "echo-slice.yaml", adstest.EchoSlice("echo-1", []string{"10.244.0.11", "10.244.0.12"}))
	pipelinetest.WriteFile(t, dir, "web-slice.yaml", adstest.WebSlice)
	p := pipelinetest.Start(t, dir)
	cc := connConfig{NATSURL: p.URL, Prefix: "pw", Timeout: 20 * time.Second, Output: "table"}
	s, err := cc.connect()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	return p, dir, cc, s
}

// responseSeq waits for the frontend's record of the response with nonce
// and returns the change sequence it was generated from.
func responseSeq(ctx context.Context, t *testing.T, s *session, nonce string) uint64 {
	t.Helper()
	var seq uint64
	testutil.Eventually(t, "the delivery record of response "+nonce, func() bool {
		ds, err := readDeliveries(ctx, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if d.Rec.GetKind() == pb.DeliveryRecord_RESPONSE && d.Rec.GetNonce() == nonce {
				seq = d.Rec.GetThroughSeq()
				return true
			}
		}
		return false
	})
	return seq
}

// checkRendered compares what the proxy received with render's output for
// the same type: the version, and each received resource byte for byte.
// With full, the response carried the whole subscription (not only what
// changed), so the names must match too.
func checkRendered(t *testing.T, got *discovery.DiscoveryResponse, rt renderedType, full bool) {
	t.Helper()
	if got.GetVersionInfo() != rt.Version {
		t.Errorf("%s: frontend sent version %s, render says %s", rt.Type, got.GetVersionInfo(), rt.Version)
	}
	byName := map[string]renderedResource{}
	var names []string
	for _, r := range rt.Resources {
		byName[r.Name] = r
		names = append(names, r.Name)
	}
	var sent []string
	for _, a := range got.GetResources() {
		msg, err := a.UnmarshalNew()
		if err != nil {
			t.Fatal(err)
		}
		name := resourceName(msg)
		sent = append(sent, name)
		r, ok := byName[name]
		if !ok {
			t.Errorf("%s: frontend sent %s, render has no such resource", rt.Type, name)
			continue
		}
		if !bytes.Equal(a.GetValue(), r.any.GetValue()) || a.GetTypeUrl() != r.any.GetTypeUrl() {
			t.Errorf("%s %s: the bytes render produced differ from the frontend's", rt.Type, name)
		}
	}
	if full {
		if diff := cmp.Diff(names, sent); diff != "" {
			t.Errorf("%s: resources (-render +frontend):\n%s", rt.Type, diff)
		}
	}
}

func resourceName(m proto.Message) string {
	type named interface{ GetName() string }
	type clustered interface{ GetClusterName() string }
	if c, ok := m.(clustered); ok {
		return c.GetClusterName()
	}
	return m.(named).GetName()
}

// TestRenderMatchesFrontend: what a raw ADS client receives from a running
// pipeline, resources and versions, is what render produces for the same
// node at the sequence the frontend generated from; after an endpoint
// change, the same holds at the new sequence, and render at the old one
// still gives the old config.
func TestRenderMatchesFrontend(t *testing.T) {
	p, dir, cc, s := startMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	c := adstest.Dial(ctx, t, p.ADSAddr, adstest.WebNode)

	cds := c.Request(resource.ClusterType)
	eds := c.Request(resource.EndpointType, adstest.EDSNames(t, cds)...)
	lds := c.Request(resource.ListenerType)
	rds := c.Request(resource.RouteType, adstest.RDSNames(t, lds)...)
	if len(eds.GetResources()) == 0 || len(rds.GetResources()) == 0 {
		t.Fatalf("want load assignments and routes, got %d and %d", len(eds.GetResources()), len(rds.GetResources()))
	}
	seq := responseSeq(ctx, t, s, rds.GetNonce())
	for _, r := range []*discovery.DiscoveryResponse{cds, eds, lds} {
		if got := responseSeq(ctx, t, s, r.GetNonce()); got != seq {
			t.Fatalf("%s generated at seq %d, routes at %d: the mesh changed under the test", r.GetTypeUrl(), got, seq)
		}
	}
	pf := proxyFlags{Proxy: adstest.WebNode}
	res, err := pf.resolve()
	if err != nil {
		t.Fatal(err)
	}
	before, err := renderAt(ctx, s, res, point{Seq: seq}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if before.Seq != seq {
		t.Fatalf("render replayed through %d, want %d", before.Seq, seq)
	}
	for i, r := range []*discovery.DiscoveryResponse{cds, eds, lds, rds} {
		checkRendered(t, r, before.Types[i], true)
	}

	// An endpoint change: the frontend pushes the changed load assignment.
	pipelinetest.WriteFile(t, dir, "echo-slice.yaml", adstest.EchoSlice("echo-1", []string{"10.244.0.11", "10.244.0.12", "10.244.0.13"}))
	push := c.Recv()
	if push.GetTypeUrl() != resource.EndpointType {
		t.Fatalf("pushed %s, want load assignments", push.GetTypeUrl())
	}
	c.ACK(push, adstest.EDSNames(t, cds)...)
	seq2 := responseSeq(ctx, t, s, push.GetNonce())
	after, err := renderAt(ctx, s, res, point{Seq: seq2}, []string{resource.EndpointType})
	if err != nil {
		t.Fatal(err)
	}
	checkRendered(t, push, after.Types[0], false)
	if after.Types[0].Version == before.Types[1].Version {
		t.Errorf("EDS version did not change across the endpoint change")
	}
	again, err := renderAt(ctx, s, res, point{Seq: seq}, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkRendered(t, eds, again.Types[1], true)

	// proxy-config: the same config as tables, now and before the change.
	for _, tc := range []struct {
		what, at      string
		want, notWant []string
	}{
		{"endpoint", "", []string{"10.244.0.13:9080", "HEALTHY", "zone-a", "outbound|8080||echo.default.svc.cluster.local"}, nil},
		{"endpoint", itoa(seq), []string{"10.244.0.12:9080"}, []string{"10.244.0.13"}},
		{"cluster", "", []string{"echo.default.svc.cluster.local", "outbound", "inbound", "EDS"}, nil},
		{"listener", "", []string{"virtualOutbound", "virtualInbound", "0.0.0.0_80", "Route: 80"}, nil},
		{"route", "", []string{"web.shop.svc.cluster.local:80", "outbound|80||web.shop.svc.cluster.local"}, nil},
	} {
		var out bytes.Buffer
		pc := proxyConfigConfig{connConfig: cc, At: tc.at}
		if err := runProxyConfig(ctx, &out, pc, tc.what, adstest.WebNode); err != nil {
			t.Fatal(err)
		}
		for _, w := range tc.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("proxy-config %s --at %q lacks %q:\n%s", tc.what, tc.at, w, out.String())
			}
		}
		for _, w := range tc.notWant {
			if strings.Contains(out.String(), w) {
				t.Errorf("proxy-config %s --at %q has %q:\n%s", tc.what, tc.at, w, out.String())
			}
		}
	}

	// The command itself, as JSON: the versions the proxy got.
	var out bytes.Buffer
	rc := renderConfig{connConfig: cc, proxyFlags: pf, At: "", Types: []string{"eds"}}
	rc.Output = "json"
	if err := runRender(ctx, &out, rc); err != nil {
		t.Fatal(err)
	}
	var got rendering
	if err := json.Unmarshal(out.Bytes(), &got); err != nil {
		t.Fatalf("%v:\n%s", err, out.String())
	}
	if len(got.Types) != 1 || got.Types[0].Version != push.GetVersionInfo() || len(got.Types[0].Resources[0].Resource) == 0 {
		t.Errorf("render -o json --type eds: %+v, want version %s with resources", got.Types, push.GetVersionInfo())
	}
}

func itoa(n uint64) string { return strconv.FormatUint(n, 10) }

// TestRenderAppliesTheMeshConfig: render builds the model with the
// --mesh-config the frontends run with, not only the generators: with
// defaultServiceExportTo "~" no Service is visible to the proxy, so no
// outbound cluster of one is rendered. Before the fix the model was built
// with Istio's defaults whatever the flag said, and the echo and web
// clusters were rendered.
func TestRenderAppliesTheMeshConfig(t *testing.T) {
	_, _, _, s := startMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	outbound := func(mc string) []string {
		t.Helper()
		pf := proxyFlags{Proxy: adstest.WebNode, MeshConfig: mc}
		res, err := pf.resolve()
		if err != nil {
			t.Fatal(err)
		}
		out, err := renderAt(ctx, s, res, point{}, []string{resource.ClusterType})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, r := range out.Types[0].Resources {
			if strings.HasPrefix(r.Name, "outbound|") {
				names = append(names, r.Name)
			}
		}
		return names
	}
	if got := outbound(""); len(got) == 0 {
		t.Fatal("with Istio's defaults: no outbound cluster rendered; the test mesh is not what this test expects")
	}
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(path, []byte("defaultServiceExportTo: [\"~\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := outbound(path); len(got) != 0 {
		t.Errorf("with defaultServiceExportTo ~: outbound clusters %v rendered, want none", got)
	}
}
