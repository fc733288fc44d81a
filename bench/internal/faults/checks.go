package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// streamMsg is one message of a stream, decoded later.
type streamMsg struct {
	seq  uint64
	data []byte
}

// streamInfo looks a stream up and reads its info.
func streamInfo(ctx context.Context, js jetstream.JetStream, name string) (jetstream.Stream, *jetstream.StreamInfo, error) {
	s, err := js.Stream(ctx, name)
	if err != nil {
		return nil, nil, fmt.Errorf("stream %s: %w", name, err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("stream %s info: %w", name, err)
	}
	return s, info, nil
}

// lastMsg reads a stream's last message with one get request to the
// stream (no consumer), or nil when the stream is empty.
func lastMsg(ctx context.Context, js jetstream.JetStream, name string) (*streamMsg, error) {
	s, info, err := streamInfo(ctx, js, name)
	if err != nil {
		return nil, err
	}
	if info.State.Msgs == 0 {
		return nil, nil
	}
	m, err := s.GetMsg(ctx, info.State.LastSeq)
	if err != nil {
		return nil, fmt.Errorf("stream %s message %d: %w", name, info.State.LastSeq, err)
	}
	return &streamMsg{seq: m.Sequence, data: m.Data}, nil
}

// readStream reads every message of a stream, up to its last sequence at
// the time of the call, with an ordered consumer.
func readStream(ctx context.Context, js jetstream.JetStream, name string) ([]streamMsg, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s, info, err := streamInfo(ctx, js, name)
	if err != nil {
		return nil, err
	}
	last := info.State.LastSeq
	if info.State.Msgs == 0 {
		return nil, nil
	}
	cons, err := s.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return nil, fmt.Errorf("stream %s consumer: %w", name, err)
	}
	it, err := cons.Messages()
	if err != nil {
		return nil, err
	}
	defer it.Stop()
	var out []streamMsg
	for {
		m, err := it.Next(jetstream.NextContext(ctx))
		if err != nil {
			return nil, fmt.Errorf("read %s after %d messages: %w", name, len(out), err)
		}
		md, err := m.Metadata()
		if err != nil {
			return nil, err
		}
		out = append(out, streamMsg{seq: md.Sequence.Stream, data: m.Data()})
		if md.Sequence.Stream >= last {
			return out, nil
		}
	}
}

// recordCheck compares the change stream with what the churn wrote.
type recordCheck struct {
	// Lost: objects whose last record is not their final content on disk
	// (or a Service never recorded): the stream's state is wrong.
	Lost int
	// Skipped: intermediate versions never on the stream, replaced on disk
	// before ingest published them while it was running (its publish
	// retrying, or its lease lost): the history has a gap, the state is
	// right. Coalesced: the same while ingest was down or not yet writing.
	Skipped, Coalesced int
	Duplicated         int // versions on the stream more than once
	Reordered          int // versions on the stream before an older one
	Unknown            int // records of the churn's objects with content never written
	Records            int // records checked
}

func (r recordCheck) ok() bool {
	return r.Lost == 0 && r.Duplicated == 0 && r.Reordered == 0 && r.Unknown == 0
}

// downWindow is a span when ingest could not observe the directory.
type downWindow struct{ from, to time.Time }

// checkRecords reads the change stream and compares, per phase, each
// EndpointSlice's records with the versions written (and each Service
// with its single record). A version replaced while ingest was down is
// excused (the source had moved on before anyone could read it).
func checkRecords(msgs []streamMsg, c *churn, down []downWindow, phases int) ([]recordCheck, error) {
	out := make([]recordCheck, phases+1) // index phase+1; 0 is the initial mesh
	slices := make(map[string][]string)
	services := make(map[string]int)
	for _, m := range msgs {
		rec := &pb.ChangeRecord{}
		if err := proto.Unmarshal(m.data, rec); err != nil {
			return nil, fmt.Errorf("change record %d: %w", m.seq, err)
		}
		switch rec.GetRef().GetKind() {
		case "Service":
			services[rec.GetRef().GetName()]++
		case "EndpointSlice":
			var obj struct {
				Endpoints []struct {
					Addresses []string `json:"addresses"`
				} `json:"endpoints"`
			}
			if err := json.Unmarshal(rec.GetObject(), &obj); err != nil {
				return nil, fmt.Errorf("change record %d: object: %w", m.seq, err)
			}
			var ips []string
			for _, e := range obj.Endpoints {
				if len(e.Addresses) > 0 {
					ips = append(ips, e.Addresses[0])
				}
			}
			slices[rec.GetRef().GetName()] = append(slices[rec.GetRef().GetName()], strings.Join(ips, ","))
		}
	}
	for name, phase := range c.services {
		r := &out[phase+1]
		r.Records += services[name]
		switch n := services[name]; {
		case n == 0:
			r.Lost++
		case n > 1:
			r.Duplicated += n - 1
		}
	}
	excused := func(w *written) bool {
		if w.next.IsZero() {
			return false
		}
		for _, d := range down {
			if !w.at.Before(d.from) && !w.next.After(d.to) {
				return true
			}
		}
		return false
	}
	for _, name := range c.order {
		vs := c.versions[name]
		got := slices[name]
		index := make(map[string]int, len(vs))
		for i, w := range vs {
			index[w.content] = i
		}
		seen := make(map[int]int)
		last := -1
		for _, content := range got {
			i, ok := index[content]
			if !ok {
				out[0].Unknown++
				continue
			}
			r := &out[vs[i].phase+1]
			r.Records++
			seen[i]++
			if seen[i] > 1 {
				r.Duplicated++
			}
			if i < last {
				r.Reordered++
			}
			last = max(last, i)
		}
		for i, w := range vs {
			if seen[i] > 0 {
				continue
			}
			switch {
			case i == len(vs)-1:
			case excused(w):
				out[w.phase+1].Coalesced++
			default:
				out[w.phase+1].Skipped++
			}
		}
		if len(got) == 0 || got[len(got)-1] != vs[len(vs)-1].content {
			out[vs[len(vs)-1].phase+1].Lost++
		}
	}
	return out, nil
}

// pushCheck checks the PUSHES stream over a range of change sequences.
type pushCheck struct {
	Requests   int // PushRequests whose through_seq falls in the range
	Uncovered  int // change sequences in the range no request covers
	Duplicated int // change sequences covered by more than one request
	Reordered  int // requests whose through_seq is not above every earlier one
}

func (p pushCheck) ok() bool { return p.Uncovered == 0 && p.Duplicated == 0 && p.Reordered == 0 }

// checkPushes decodes every PushRequest and checks the change sequences
// (from, to] against them: each covered by exactly one request, and the
// requests in through_seq order.
func checkPushes(msgs []streamMsg, from, to uint64) (pushCheck, error) {
	var out pushCheck
	covered := make(map[uint64]int)
	var highest uint64
	for _, m := range msgs {
		req := &pb.PushRequest{}
		if err := proto.Unmarshal(m.data, req); err != nil {
			return out, fmt.Errorf("push request %d: %w", m.seq, err)
		}
		through := req.GetThroughSeq()
		inRange := through > from && through <= to
		if inRange {
			out.Requests++
			if through <= highest {
				out.Reordered++
			}
		}
		highest = max(highest, through)
		for _, r := range req.GetCovered() {
			for s := max(r.GetFirst(), from+1); s <= min(r.GetLast(), to); s++ {
				covered[s]++
			}
		}
	}
	for s := from + 1; s <= to; s++ {
		switch n := covered[s]; {
		case n == 0:
			out.Uncovered++
		case n > 1:
			out.Duplicated += n - 1
		}
	}
	return out, nil
}

// throughOf is a PushRequest's through_seq.
func throughOf(m streamMsg) (uint64, error) {
	req := &pb.PushRequest{}
	if err := proto.Unmarshal(m.data, req); err != nil {
		return 0, fmt.Errorf("push request %d: %w", m.seq, err)
	}
	return req.GetThroughSeq(), nil
}
