package debouncer

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// BenchmarkRebuildIndex: a new term's rebuild of the endpoint index (what
// a debouncer take-over reads before it debounces anything) from the last
// record of 10,000 EndpointSlices of 10 endpoints each and of their
// 100,000 Pods, on embedded JetStream with file storage.
//
//	go test ./services/debouncer -run '^$' -bench BenchmarkRebuildIndex -benchtime 5x
func BenchmarkRebuildIndex(b *testing.B) {
	const slices, perSlice = 10_000, 10
	_, js := natstest.Connect(b, natstest.Start(b))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	stream, err := bus.EnsureStream(ctx, js, names.ChangesConfig(bus.StreamOptions{}))
	if err != nil {
		b.Fatal(err)
	}
	publish := func(ref *pb.ObjectRef, obj any) {
		raw, err := json.Marshal(obj)
		if err != nil {
			b.Fatal(err)
		}
		data, err := proto.Marshal(&pb.ChangeRecord{Cluster: "c1", Ref: ref, Op: pb.Op_OP_ADD, Object: raw})
		if err != nil {
			b.Fatal(err)
		}
		natstest.PublishAsync(b, js, names.ChangeSubject("c1", ref), data)
	}
	for s := range slices {
		pods := make([]string, perSlice)
		for e := range pods {
			pods[e] = fmt.Sprintf("pod-%05d-%d", s, e)
			publish(&pb.ObjectRef{Version: "v1", Kind: "Pod", Namespace: "ns", Name: pods[e]}, podObject(pods[e], "v1"))
		}
		name := fmt.Sprintf("svc-%05d-abcde", s)
		publish(&pb.ObjectRef{Group: "discovery.k8s.io", Version: "v1", Kind: "EndpointSlice", Namespace: "ns", Name: name},
			serviceSlice(fmt.Sprintf("svc-%05d", s), name, pods...))
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		b.Fatal("publishing the stream did not complete")
	}
	info, err := stream.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	a := &active{names: names, changes: stream, log: slog.New(slog.DiscardHandler), m: newMetrics(reg)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.rebuildIndex(ctx, info.State.LastSeq, DefaultIndexRebuildMax); err != nil {
			b.Fatal(err)
		}
	}
	if got := testutil.Metric(reg, "pilotwire_debounce_index_rebuild_pods"); got != slices*perSlice {
		b.Fatalf("index holds %v pods, want %d", got, slices*perSlice)
	}
	b.ReportMetric(float64((slices*(perSlice+1))*b.N)/b.Elapsed().Seconds(), "records/s")
}
