package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
	err := runHistory(ctx, &out, historyConfig{connConfig: connConfig{NATSURL: url, Prefix: "pw", Timeout: 10 * time.Second, Output: "table"}, Cluster: "Kubernetes", Namespace: "default"},
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

// TestHistoryFilters selects records by kind, namespace and time, and diffs
// each update against the object's previous record, even one printed
// before --since.
func TestHistoryFilters(t *testing.T) {
	url := natstest.Start(t)
	_, js := natstest.Connect(t, url)
	names, _ := bus.NewNames("pw")
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	if _, err := bus.EnsureStream(ctx, js, names.ChangesConfig(bus.StreamOptions{})); err != nil {
		t.Fatal(err)
	}
	publish := func(kind, group, ns, name string, op pb.Op, rv, obj string) time.Time {
		ref := &pb.ObjectRef{Group: group, Version: "v1", Kind: kind, Namespace: ns, Name: name}
		b, _ := proto.Marshal(&pb.ChangeRecord{Cluster: "Kubernetes", Ref: ref, Op: op, Uid: "u-" + name, ResourceVersion: rv,
			ObservedAt: timestamppb.Now(), Object: []byte(obj)})
		ack, err := js.Publish(ctx, names.ChangeSubject("Kubernetes", ref), b)
		if err != nil {
			t.Fatal(err)
		}
		m, err := js.Stream(ctx, names.ChangesStream())
		if err != nil {
			t.Fatal(err)
		}
		raw, err := m.GetMsg(ctx, ack.Sequence)
		if err != nil {
			t.Fatal(err)
		}
		return raw.Time
	}
	svc := func(port int) string {
		return fmt.Sprintf(`{"metadata":{"name":"web","namespace":"shop","resourceVersion":"%d"},"spec":{"ports":[{"port":%d}]}}`, port, port)
	}
	publish("Service", "", "shop", "web", pb.Op_OP_ADD, "1", svc(80))
	publish("Service", "", "default", "echo", pb.Op_OP_ADD, "1", `{"metadata":{"name":"echo"}}`)
	publish("EndpointSlice", "discovery.k8s.io", "shop", "web-1", pb.Op_OP_ADD, "1", `{"metadata":{"name":"web-1"}}`)
	second := publish("Service", "", "shop", "web", pb.Op_OP_UPDATE, "2", svc(8080))
	publish("Service", "", "shop", "web", pb.Op_OP_DELETE, "2", svc(8080))

	run := func(c historyConfig) []historyEntry {
		t.Helper()
		c.connConfig = connConfig{NATSURL: url, Prefix: "pw", Timeout: 10 * time.Second, Output: "json"}
		var out bytes.Buffer
		if err := runHistory(ctx, &out, c, "", ""); err != nil {
			t.Fatal(err)
		}
		var es []historyEntry
		if err := json.Unmarshal(out.Bytes(), &es); err != nil {
			t.Fatalf("%v:\n%s", err, out.String())
		}
		return es
	}
	type row struct {
		Seq  uint64
		Op   string
		Name string
		Diff []string
	}
	rows := func(es []historyEntry) []row {
		var out []row
		for _, e := range es {
			out = append(out, row{e.Seq, e.Op, e.Name, e.Diff})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		cfg  historyConfig
		want []row
	}{
		{"kind and namespace", historyConfig{Kind: "Service", Namespace: "shop"}, []row{
			{1, "ADD", "web", nil},
			{4, "UPDATE", "web", []string{"~ spec.ports[0].port: 80 -> 8080"}},
			{5, "DELETE", "web", nil},
		}},
		{"group kind", historyConfig{Kind: "EndpointSlice.discovery.k8s.io"}, []row{{3, "ADD", "web-1", nil}}},
		{"name in any namespace", historyConfig{Name: "echo"}, []row{{2, "ADD", "echo", nil}}},
		{"since keeps the diff", historyConfig{Kind: "Service", Since: second.Format(time.RFC3339Nano), Until: second.Format(time.RFC3339Nano)}, []row{
			{4, "UPDATE", "web", []string{"~ spec.ports[0].port: 80 -> 8080"}},
		}},
		{"nothing", historyConfig{Cluster: "elsewhere"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, rows(run(tc.cfg))); diff != "" {
				t.Errorf("records (-want +got):\n%s", diff)
			}
		})
	}
}
