package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestHistory prints one object's records, and only that object's, in order.
func TestHistory(t *testing.T) {
	url := natstest.Start(t)
	_, js := natstest.Connect(t, url)
	names, _ := bus.NewNames("pw")
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	if _, err := bus.EnsureStream(ctx, js, names.ChangesConfig(bus.StreamOptions{})); err != nil {
		t.Fatal(err)
	}
	publish := func(name string, op pb.Op, rv string) {
		ref := &pb.ObjectRef{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice", Namespace: "default", Name: name}
		b, _ := proto.Marshal(&pb.ChangeRecord{Cluster: "Kubernetes", Ref: ref, Op: op, Uid: "u-" + name, ResourceVersion: rv,
			ObservedAt: timestamppb.New(time.Unix(1700000000, 0)), Object: []byte(`{"metadata":{"name":"` + name + `"}}`), Source: "file:x.yaml#0"})
		if _, err := js.Publish(ctx, names.ChangeSubject("Kubernetes", ref), b); err != nil {
			t.Fatal(err)
		}
	}
	publish("echo.v1", pb.Op_OP_ADD, "1") // a dot in the name: escaped in the subject
	publish("other", pb.Op_OP_ADD, "7")
	publish("echo.v1", pb.Op_OP_UPDATE, "2")
	publish("echo.v1", pb.Op_OP_DELETE, "2")

	var out bytes.Buffer
	err := runHistory(ctx, &out, historyConfig{NATSURL: url, Prefix: "pw", Cluster: "Kubernetes", Namespace: "default", Timeout: 10 * time.Second},
		"EndpointSlice.discovery.k8s.io", "echo.v1")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("history has %d lines, want a header and 3 records:\n%s", len(lines), out.String())
	}
	for i, want := range []string{"ADD", "UPDATE", "DELETE"} {
		if f := strings.Fields(lines[i+1]); len(f) < 4 || f[2] != want {
			t.Errorf("record %d: %q, want op %s", i, lines[i+1], want)
		}
	}
	if strings.Contains(out.String(), "u-other") {
		t.Errorf("history of echo.v1 shows another object:\n%s", out.String())
	}
}
