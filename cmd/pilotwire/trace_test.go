package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"

	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/pilotwire/pilotwire/internal/testkit/adstest"
	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

// TestBrokenConfig breaks a proxy's config on purpose: a raw ADS client
// NACKs the load assignment that brings endpoint 10.244.0.66. trace shows
// the change, the PushRequest, the NACK and its error; render before and
// after shows the two configs; diff shows exactly the changed resource.
func TestBrokenConfig(t *testing.T) {
	p, dir, cc, s := startMesh(t)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	c := adstest.Dial(ctx, t, p.ADSAddr, adstest.WebNode)
	cds := c.Request(resource.ClusterType)
	edsSub := adstest.EDSNames(t, cds)
	eds := c.Request(resource.EndpointType, edsSub...)
	lds := c.Request(resource.ListenerType)
	rds := c.Request(resource.RouteType, adstest.RDSNames(t, lds)...)
	before := responseSeq(ctx, t, s, rds.GetNonce())

	const reject = "endpoint 10.244.0.66: rejected on purpose"
	pipelinetest.WriteFile(t, dir, "echo-slice.yaml", adstest.EchoSlice("echo-1", []string{"10.244.0.11", "10.244.0.12", "10.244.0.66"}))
	push := c.Recv()
	if push.GetTypeUrl() != resource.EndpointType || !strings.Contains(push.String(), "10.244.0.66") {
		t.Fatalf("want the load assignment with 10.244.0.66, got %s", push.GetTypeUrl())
	}
	c.NACK(push, eds.GetVersionInfo(), reject, edsSub...)
	after := responseSeq(ctx, t, s, push.GetNonce())
	if after <= before {
		t.Fatalf("push generated at seq %d, not after %d", after, before)
	}

	// trace: the object's latest record is the change.
	var rep *traceReport
	testutil.Eventually(t, "trace to show the NACK", func() bool {
		var err error
		if rep, err = trace(ctx, s, "Kubernetes", "EndpointSlice.discovery.k8s.io/default/echo-1"); err != nil {
			t.Fatal(err)
		}
		for _, d := range rep.Deliveries {
			if d.Result == "NACK" {
				return true
			}
		}
		return false
	})
	ch := rep.Change
	if ch.Op != "UPDATE" || ch.Name != "echo-1" || ch.Seq <= before || ch.Seq > after {
		t.Errorf("change: %+v, want the UPDATE of echo-1 between seq %d and %d", ch, before, after)
	}
	if len(rep.Pushes) == 0 || rep.Pushes[0].ThroughSeq < ch.Seq {
		t.Errorf("pushes: %+v, want a PushRequest covering seq %d", rep.Pushes, ch.Seq)
	}
	want := []tracedDeliv{{Frontend: "fe-0", Node: adstest.WebNode, Type: "eds", Version: push.GetVersionInfo(), Nonce: push.GetNonce(),
		ThroughSeq: after, Result: "NACK", Error: reject}}
	if diff := cmp.Diff(want, rep.Deliveries, cmpopts.IgnoreFields(tracedDeliv{}, "Conn", "Sent", "Answered")); diff != "" {
		t.Errorf("deliveries (-want +got):\n%s", diff)
	}
	var out bytes.Buffer
	if err := runTrace(ctx, &out, traceConfig{connConfig: cc, Cluster: "Kubernetes"}, "EndpointSlice.discovery.k8s.io/default/echo-1"); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"UPDATE", "NACK", reject, "PUSH"} {
		if !strings.Contains(out.String(), w) {
			t.Errorf("trace output lacks %q:\n%s", w, out.String())
		}
	}

	// status: the proxy comes first, its load assignments NACKed.
	var st *statusReport
	testutil.Eventually(t, "the registry entry with four watches", func() bool {
		var err error
		if st, err = status(ctx, s); err != nil {
			t.Fatal(err)
		}
		return len(st.Proxies) == 1 && len(st.Proxies[0].Types) == 4
	})
	if len(st.Proxies) != 1 || st.Proxies[0].Node != adstest.WebNode || st.Proxies[0].Frontend != "fe-0" {
		t.Fatalf("status: %+v, want the one proxy", st.Proxies)
	}
	states := map[string]string{}
	for typ, ts := range st.Proxies[0].Types {
		states[typ] = ts.State
	}
	if diff := cmp.Diff(map[string]string{"cds": "SYNCED", "eds": "NACKED", "lds": "SYNCED", "rds": "SYNCED"}, states); diff != "" {
		t.Errorf("status states (-want +got):\n%s", diff)
	}
	if e := st.Proxies[0].Types["eds"]; e.Error != reject || e.Sent != push.GetVersionInfo() || e.Acked != eds.GetVersionInfo() {
		t.Errorf("eds status %+v, want sent %s, acked %s, error %q", e, push.GetVersionInfo(), eds.GetVersionInfo(), reject)
	}
	out.Reset()
	if err := runStatus(ctx, &out, statusConfig{connConfig: cc}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "NACKED") || !strings.Contains(out.String(), reject) {
		t.Errorf("status output:\n%s", out.String())
	}

	// render before and after: the two configs the proxy was sent.
	pf := proxyFlags{Proxy: adstest.WebNode}
	res, err := pf.resolve()
	if err != nil {
		t.Fatal(err)
	}
	rb, err := renderAt(ctx, s, res, point{Seq: before}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ra, err := renderAt(ctx, s, res, point{Seq: after}, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkRendered(t, eds, rb.Types[1], true)
	checkRendered(t, push, ra.Types[1], false)

	// diff: exactly the changed load assignment.
	d, err := diffRenderings(rb, ra)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ch := range d.Changes {
		got = append(got, ch.Change+" "+ch.Type+" "+ch.Name)
	}
	if diff := cmp.Diff([]string{"changed eds outbound|8080||echo.default.svc.cluster.local"}, got); diff != "" {
		t.Fatalf("changes (-want +got):\n%s", diff)
	}
	if !regexp.MustCompile(`(?m)^\+\s+"address": "10.244.0.66",$`).MatchString(d.Changes[0].Diff) {
		t.Errorf("the diff does not show the new endpoint:\n%s", d.Changes[0].Diff)
	}
	out.Reset()
	dc := diffConfig{connConfig: cc, proxyFlags: pf, From: itoa(before), To: itoa(after)}
	if err := runDiff(ctx, &out, dc); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "changed eds outbound|8080||echo.default.svc.cluster.local") || !strings.Contains(out.String(), "10.244.0.66") {
		t.Errorf("diff output:\n%s", out.String())
	}
}
