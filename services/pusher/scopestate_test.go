package pusher

import (
	"context"
	"slices"
	"testing"

	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// registerScoped writes the registry entry of a connection in namespace
// app with a scope computed at scopeSeq importing only app.
func (f *fakeFrontend) registerScoped(conn string, synced, scopeSeq uint64) {
	f.t.Helper()
	ci := &pb.ConnectionInfo{ConnId: conn, Frontend: f.id, Namespace: "app", SyncedSeq: synced,
		NodeId:  "sidecar~1.1.1.1~" + conn + ".app~app.svc.cluster.local",
		Watches: []*pb.Watch{{TypeUrl: resource.ClusterType, Wildcard: true}},
		Scope:   &pb.Scope{Seq: scopeSeq, RootNamespace: "istio-system", Imports: []string{"app/*"}}}
	b, _ := proto.Marshal(ci)
	if _, err := f.kv.Put(context.Background(), bus.ConnKey(f.id, conn), b); err != nil {
		f.t.Fatal(err)
	}
}

// scopeSkips is skipped_total{reason="scope"}.
func (h *harness) scopeSkips(t *testing.T) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "pilotwire_pusher_skipped_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "reason" && l.GetValue() == "scope" }) {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestScopeAfterSidecarChange: a connection whose scope leaves out a
// namespace is not pushed its changes; once a change of its Sidecar was
// pushed to it, its scope is not trusted (every change reaches it) until
// an entry computed at least that late comes.
func TestScopeAfterSidecarChange(t *testing.T) {
	h := startPusher(t, Config{FrontendTimeout: onceHeartbeatTimeout})
	fe := newFrontend(t, h.url, "fe-1")
	fe.registerScoped("c", 10, 10)
	fe.register("probe-1", 10)
	testutil.Eventually(t, "connections known", func() bool { return h.metric("pilotwire_pusher_connections") == 2 })
	requests := 0.0
	push := func(seq uint64, kind, ns string) {
		t.Helper()
		h.push(t, &pb.PushRequest{Full: true, ThroughSeq: seq, FirstSeq: seq, Covered: []*pb.SeqRange{{First: seq, Last: seq}},
			ConfigKeys: []*pb.ConfigKey{{Kind: kind, Namespace: ns, Name: "x"}}})
		requests++
		testutil.Eventually(t, "request queued", func() bool { return h.metric("pilotwire_pusher_push_requests_total") == requests })
	}
	ordered := func(seq uint64) bool { return slices.Contains(fe.ordersFor("c"), seq) }

	push(11, "Service", "other")
	if got := h.scopeSkips(t); got != 1 || ordered(11) {
		t.Fatalf("change in other: skipped{scope} = %v, orders %v; want 1 and none", got, fe.ordersFor("c"))
	}
	push(12, "Sidecar", "app")
	testutil.Eventually(t, "its Sidecar's change ordered", func() bool { return ordered(12) })
	push(13, "Service", "other")
	testutil.Eventually(t, "a change in other ordered while the scope may be stale", func() bool { return ordered(13) })
	if got := h.scopeSkips(t); got != 1 {
		t.Fatalf("skipped{scope} = %v after the Sidecar change, want 1", got)
	}

	// The frontend renews the scope at 13; a new connection's entry after
	// it tells when the pusher has read it.
	fe.registerScoped("c", 13, 13)
	fe.register("probe-2", 13)
	testutil.Eventually(t, "entries read", func() bool { return h.metric("pilotwire_pusher_connections") == 3 })
	push(14, "Service", "other")
	if got := h.scopeSkips(t); got != 2 {
		t.Fatalf("change in other after the renewal: skipped{scope} = %v, want 2", got)
	}
}
