package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
)

// TestStreamsApply: on a 3-node cluster whose streams a service created at
// one replica, `streams check --replicas 3` reports each and exits
// non-zero, `streams apply --replicas 3` raises them all to 3, and a check
// after it is clean.
func TestStreamsApply(t *testing.T) {
	c := natstest.StartCluster(t, natstest.ClusterOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	_, js := natstest.Connect(t, c.URLs())
	names, _ := bus.NewNames("pw")
	// What a service started without --replicas created, the deliveries
	// stream and the snapshot object store left missing.
	if _, err := bus.EnsureStream(ctx, js, names.ChangesConfig(bus.StreamOptions{})); err != nil {
		t.Fatal(err)
	}
	if _, err := bus.EnsureKV(ctx, js, names.LeaseConfig(bus.StreamOptions{})); err != nil {
		t.Fatal(err)
	}
	conn := connConfig{NATSURL: c.URLs(), Prefix: "pw", Timeout: 30 * time.Second, Output: "table"}
	run := func(apply bool) (string, error) {
		var out bytes.Buffer
		err := runStreams(ctx, &out, streamsConfig{connConfig: conn, Replicas: 3}, apply)
		return out.String(), err
	}

	out, err := run(false)
	if !errors.Is(err, errDrift) {
		t.Errorf("check: err %v, want %v", err, errDrift)
	}
	for _, want := range []string{"PW_CHANGES  differs  replicas: have 1, want 3", "PW_DELIVERIES  missing", "PW_LEASES  differs  replicas: have 1, want 3", "object store  PW_SNAPSHOTS  missing"} {
		if !strings.Contains(strings.Join(strings.Fields(out), "  "), strings.Join(strings.Fields(want), "  ")) {
			t.Errorf("check output lacks %q:\n%s", want, out)
		}
	}
	if out, err = run(true); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	if out, err = run(false); err != nil {
		t.Errorf("check after apply: %v\n%s", err, out)
	}
	for _, name := range []string{names.ChangesStream(), names.PushesStream(), names.DeliveriesStream(), "KV_" + names.RegistryBucket(), "KV_" + names.LeaseBucket(), "OBJ_" + names.SnapshotBucket()} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().Config.Replicas; got != 3 {
			t.Errorf("%s: %d replicas after apply, want 3", name, got)
		}
	}
}
