package bus_test

import (
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
)

// flakyOpenJS fails the first opening of an object store, as while its
// stream has no leader.
type flakyOpenJS struct {
	jetstream.JetStream
	failed bool
}

func (js *flakyOpenJS) ObjectStore(ctx context.Context, bucket string) (jetstream.ObjectStore, error) {
	if !js.failed {
		js.failed = true
		return nil, errors.New("nats: no responders available for request")
	}
	return js.JetStream.ObjectStore(ctx, bucket)
}

// TestEnsureObjectStoreNeverChangesOne: a failure to open an existing
// object store is returned, never taken for "missing". Before, any error
// fell through to CreateOrUpdateObjectStore, which rewrote the store's
// config from the caller's (a service's --replicas), and which the
// debouncer's least-privilege user may not do: in the fault matrix the
// snapshotter failed that way on every try after a NATS node was lost
// (permission violation on $JS.API.STREAM.UPDATE.OBJ_PW_SNAPSHOTS, then a
// timeout), so no snapshot was written again.
func TestEnsureObjectStoreNeverChangesOne(t *testing.T) {
	_, js := natstest.Connect(t, natstest.Start(t))
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	n, _ := bus.NewNames("pw")
	have := n.SnapshotsConfig(bus.StreamOptions{})
	have.MaxBytes = 1 << 20
	if _, err := js.CreateObjectStore(ctx, have); err != nil {
		t.Fatal(err)
	}
	flaky := &flakyOpenJS{JetStream: js}
	if _, err := bus.EnsureObjectStore(ctx, flaky, n.SnapshotsConfig(bus.StreamOptions{})); err == nil {
		t.Error("EnsureObjectStore succeeded although the store could not be opened")
	}
	os, err := bus.EnsureObjectStore(ctx, flaky, n.SnapshotsConfig(bus.StreamOptions{}))
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.(*jetstream.ObjectBucketStatus).StreamInfo().Config.MaxBytes; got != have.MaxBytes {
		t.Fatalf("the store's max bytes are %d after EnsureObjectStore, want its own %d left alone", got, have.MaxBytes)
	}
	// A missing one is created.
	other := n.SnapshotsConfig(bus.StreamOptions{})
	other.Bucket = "PW_OTHER"
	if _, err := bus.EnsureObjectStore(ctx, js, other); err != nil {
		t.Fatalf("EnsureObjectStore of a missing store: %v", err)
	}
}
