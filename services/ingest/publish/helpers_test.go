package publish_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
	"github.com/pilotwire/pilotwire/services/ingest/internal/ingesttest"
	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

const cluster = "Kubernetes"

var names = bus.Names{Prefix: "pw"}

func testCtx(t testing.TB) context.Context { return ingesttest.Ctx(t) }

type env struct {
	js  jetstream.JetStream
	reg *prometheus.Registry
	log *ingesttest.LogBuffer
}

func newEnv(t testing.TB) *env {
	t.Helper()
	_, js := natstest.Connect(t, natstest.Start(t))
	return &env{js: js, reg: prometheus.NewRegistry(), log: &ingesttest.LogBuffer{}}
}

// start builds and starts a publisher; opts may adjust the options.
func (e *env) start(t testing.TB, opts ...func(*publish.Options)) *publish.Publisher {
	t.Helper()
	o := publish.Options{
		Cluster:    cluster,
		Names:      names,
		Log:        slog.New(slog.NewTextHandler(e.log, nil)),
		Registerer: e.reg,
		RetryMin:   10 * time.Millisecond,
		RetryMax:   100 * time.Millisecond,
	}
	for _, f := range opts {
		f(&o)
	}
	p, err := publish.New(e.js, o)
	if err != nil {
		t.Fatalf("new publisher: %v", err)
	}
	if err := p.Start(testCtx(t)); err != nil {
		t.Fatalf("start publisher: %v", err)
	}
	return p
}

// stored is one record read back from the stream.
type stored struct {
	seq     uint64
	subject string
	msgID   string
	rec     *pb.ChangeRecord
}

// records reads every record of the CHANGES stream, in order.
func (e *env) records(t testing.TB) []stored {
	t.Helper()
	var out []stored
	for _, r := range ingesttest.Records(t, e.js, names) {
		out = append(out, stored{seq: r.Seq, subject: r.Subject, msgID: r.MsgID, rec: r.Rec})
	}
	return out
}

// summary is a short comparable form of records: "OP Kind ns/name".
func summary(rs []stored) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, ingesttest.Record{Rec: r.rec}.Summary())
	}
	return out
}

func obj(kind, ns, name, data string) publish.Object {
	json := fmt.Sprintf(`{"apiVersion":"v1","data":{"v":%q},"kind":%q,"metadata":{"name":%q,"namespace":%q}}`, data, kind, name, ns)
	return publish.Object{
		Key:     publish.Key{Kind: kind, Namespace: ns, Name: name},
		Version: "v1",
		JSON:    []byte(json),
		Source:  "test:" + name,
	}
}

// metric returns the value of a counter or gauge with the given labels.
func metric(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	return ingesttest.Metric(t, reg, name, labels)
}

func publishStreamOptions() bus.StreamOptions { return bus.StreamOptions{} }
