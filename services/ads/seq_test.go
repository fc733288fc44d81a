package ads

import (
	"context"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// heldMeshes is a model whose snapshot stays at one mesh while records are
// applied behind it, as when a record is applied between a connection's
// snapshot and anything it reads next.
type heldMeshes struct {
	*model.Store
	mesh *model.Mesh
}

func (h heldMeshes) Snapshot() *model.Mesh { return h.mesh }

// TestReconnectSkipRecordsTheSnapshotSeq: a client reconnecting with the
// current version is sent nothing, and the connection is synced at the
// sequence of the mesh it compared against, never a later one (issue 11
// #5: the pusher would skip a push at or below that later sequence).
func TestReconnectSkipRecordsTheSnapshotSeq(t *testing.T) {
	s, store, _, _ := offlineServer(t)
	applyService(t, store, 1, "default", "a", 80)
	s.meshes = heldMeshes{Store: store, mesh: store.Snapshot()}
	applyService(t, store, 2, "default", "b", 80) // not in the held snapshot

	open := func() (*conn, *fakeSotW) {
		st := &fakeSotW{}
		c := s.newConn(context.Background(), "")
		c.sotw = st
		t.Cleanup(c.finish)
		return c, st
	}
	c1, st1 := open()
	if err := c1.handleRequest(&discovery.DiscoveryRequest{Node: testNode("p"), TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	version := st1.sent[0].GetVersionInfo()

	c2, st2 := open()
	if err := c2.handleRequest(&discovery.DiscoveryRequest{Node: testNode("p"), TypeUrl: resource.ClusterType, VersionInfo: version}); err != nil {
		t.Fatal(err)
	}
	if len(st2.sent) != 0 {
		t.Fatalf("reconnect at the current version was sent %d responses, want none", len(st2.sent))
	}
	if got := c2.syncedSeq(); got != 1 {
		t.Errorf("synced seq after the reconnect skip = %d, want 1 (the snapshot's)", got)
	}
}
