// Package ingesttest holds helpers for ingest's tests: reading the CHANGES
// stream back, reading metrics, capturing logs and polling with a deadline.
package ingesttest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/bus"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// Timeout bounds every test context.
const Timeout = 30 * time.Second

// Ctx returns a context with Timeout, cancelled at the end of the test.
func Ctx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	t.Cleanup(cancel)
	return ctx
}

// Record is one record read back from the stream.
type Record struct {
	Seq     uint64
	Subject string
	MsgID   string
	Rec     *pb.ChangeRecord
}

// Summary is "OP Kind ns/name".
func (r Record) Summary() string {
	return fmt.Sprintf("%s %s %s/%s", r.Rec.GetOp(), r.Rec.GetRef().GetKind(), r.Rec.GetRef().GetNamespace(), r.Rec.GetRef().GetName())
}

// Summaries summarises records in order.
func Summaries(rs []Record) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Summary())
	}
	return out
}

// Records reads every record of the CHANGES stream, in order. A missing
// stream reads as empty.
func Records(t testing.TB, js jetstream.JetStream, names bus.Names) []Record {
	t.Helper()
	rs, err := TryRecords(Ctx(t), js, names)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TryRecords is Records returning its error.
func TryRecords(ctx context.Context, js jetstream.JetStream, names bus.Names) ([]Record, error) {
	s, err := js.Stream(ctx, names.ChangesStream())
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, fmt.Errorf("stream info: %w", err)
	}
	var out []Record
	if info.State.Msgs == 0 {
		return nil, nil
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		raw, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // purged (a subject removed from the history)
		}
		if err != nil {
			return nil, fmt.Errorf("get %d: %w", seq, err)
		}
		var rec pb.ChangeRecord
		if err := proto.Unmarshal(raw.Data, &rec); err != nil {
			return nil, fmt.Errorf("record %d: %w", seq, err)
		}
		out = append(out, Record{Seq: raw.Sequence, Subject: raw.Subject, MsgID: raw.Header.Get(jetstream.MsgIDHeader), Rec: &rec})
	}
	return out, nil
}

// Metric returns the value of a counter or gauge whose labels include
// labels, or 0.
func Metric(t testing.TB, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range labels {
				if !hasLabel(m, k, v) {
					continue next
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return 0
}

func hasLabel(m *dto.Metric, k, v string) bool {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == k && lp.GetValue() == v {
			return true
		}
	}
	return false
}

// LogBuffer is a log sink safe for concurrent writes.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *LogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *LogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// WaitFor polls cond until it holds or ctx ends; then it fails the test
// with cond's last description.
func WaitFor(t testing.TB, ctx context.Context, what string, cond func() (bool, string)) {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, desc := cond()
		if ok {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s; last state: %s", what, desc)
		case <-tick.C:
		}
	}
}
