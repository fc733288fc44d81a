package ads

import (
	"context"
	"errors"
	"io"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
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

// TestReceiveErrorEndsTheStreamWithItsStatus: a receive that fails for
// any reason but the client going away ends the stream with that error's
// status, not OK (issue 11 #12).
func TestReceiveErrorEndsTheStreamWithItsStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want codes.Code
	}{
		{name: "status", err: status.Error(codes.ResourceExhausted, "message too large"), want: codes.ResourceExhausted},
		{name: "plain error", err: errors.New("broken"), want: codes.Internal},
		{name: "client gone", err: io.EOF, want: codes.OK},
		{name: "canceled", err: status.Error(codes.Canceled, "context canceled"), want: codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, _, _ := offlineServer(t)
			ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
			defer cancel()
			c := s.newConn(ctx, "")
			c.sotw = &fakeSotW{recvErr: tc.err}
			if got := status.Code(c.run()); got != tc.want {
				t.Errorf("run() ended with %v, want %v", got, tc.want)
			}
		})
	}
}
