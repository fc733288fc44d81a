package ads

import (
	"context"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

// TestClosedConnectionsLeaveExpiringMarkers: a closed connection's
// registry key is removed with a marker that the server deletes after
// bus.RegistryMarkerTTL, so the bucket stays bounded by the live
// connections (plus recent removals), not by every connection ever made,
// and a pusher taking over does not replay them all.
func TestClosedConnectionsLeaveExpiringMarkers(t *testing.T) {
	url := natstest.Start(t)
	f := runFrontend(t, url, "fe-markers", nil)
	ctx, cancel := context.WithTimeout(t.Context(), testutil.DefaultTimeout)
	defer cancel()
	const conns = 5
	for range conns {
		c := dial(ctx, t, f.addr, sidecar())
		c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
		c.recv()
		f.waitRegistered(t, 1)
		c.cc.Close()
		f.waitRegistered(t, 0)
	}
	s, err := f.js.Stream(ctx, "KV_"+f.names.RegistryBucket())
	if err != nil {
		t.Fatal(err)
	}
	if cfg := s.CachedInfo().Config; !cfg.AllowMsgTTL || cfg.SubjectDeleteMarkerTTL <= 0 {
		t.Errorf("registry bucket: AllowMsgTTL %v, SubjectDeleteMarkerTTL %v; want per-message TTLs on", cfg.AllowMsgTTL, cfg.SubjectDeleteMarkerTTL)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter("$KV."+f.names.RegistryBucket()+".conn.>"))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.State.Subjects) != conns {
		t.Fatalf("%d connection subjects in the bucket, want %d", len(info.State.Subjects), conns)
	}
	for subj := range info.State.Subjects {
		m, err := s.GetLastMsgForSubject(ctx, subj)
		if err != nil {
			t.Fatal(err)
		}
		op, ttl := m.Header.Get("KV-Operation"), m.Header.Get(jetstream.MsgTTLHeader)
		if op != "PURGE" && op != "DEL" {
			t.Errorf("%s: last message is %q, want a removal marker", subj, op)
		}
		if ttl == "" {
			t.Errorf("%s: removal marker without a TTL stays in the bucket forever", subj)
		}
	}
}
