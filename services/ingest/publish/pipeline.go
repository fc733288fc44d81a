package publish

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/svc"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// outMsg is one planned record.
type outMsg struct {
	change Change // what it came from, to re-plan after a conflict
	key    Key
	e      entry // the entry the record makes, once stored
	op     pb.Op
	id     string
	msg    *nats.Msg
	fut    jetstream.PubAckFuture
}

// apply publishes changes in waves: a wave holds at most one change per
// object, and the next wave starts when every record of this one is stored.
// Caller holds mu.
func (p *Publisher) apply(ctx context.Context, changes []Change) (Result, error) {
	var res Result
	if p.stream == nil {
		return res, errors.New("publisher not started")
	}
	var (
		replans map[Key]int // re-plans of each object so far
		round   int         // rounds with re-plans so far
		backoff *time.Timer
	)
	defer func() {
		if backoff != nil {
			backoff.Stop()
		}
	}()
	for len(changes) > 0 {
		wave, rest := splitWave(changes)
		out := make([]*outMsg, 0, len(wave))
		for _, c := range wave {
			m, r, err := p.plan(ctx, c)
			res.add(r)
			if err != nil {
				return res, err
			}
			if m != nil {
				out = append(out, m)
			}
		}
		replan, r, err := p.publishAll(ctx, out)
		res.add(r)
		if err != nil {
			return res, err
		}
		if len(replan) == 0 {
			changes = rest
			continue
		}
		if replans == nil {
			replans = make(map[Key]int)
		}
		again := replan[:0]
		for _, c := range replan {
			k := c.Object.Key
			replans[k]++
			if replans[k] > p.opts.MaxReplans {
				p.reject(RejectConflicts, &c.Object, 0, fmt.Sprintf("subject moved on under %d re-plans; giving the change up", p.opts.MaxReplans))
				res.Rejected++
				continue
			}
			again = append(again, c)
		}
		p.metrics.replans.Add(float64(len(again)))
		if round++; round > 1 && len(again) > 0 {
			wait := min(p.opts.RetryMin<<min(round-2, 20), p.opts.RetryMax)
			p.log.Warn("changes conflicted again; re-planning after a backoff", "changes", len(again), "round", round, "backoff", wait)
			if backoff == nil {
				backoff = time.NewTimer(wait)
			} else {
				backoff.Reset(wait)
			}
			select {
			case <-backoff.C:
			case <-ctx.Done():
				return res, ctx.Err()
			}
		}
		changes = append(again, rest...)
	}
	return res, nil
}

// splitWave returns the first change of each object, and the others in order.
func splitWave(changes []Change) (wave, rest []Change) {
	if len(changes) == 1 {
		return changes, nil
	}
	seen := make(map[Key]struct{}, len(changes))
	for i, c := range changes {
		if _, dup := seen[c.Object.Key]; dup {
			if rest == nil {
				// Copy: changes may be the caller's slice.
				wave = append([]Change(nil), changes[:i]...)
			}
			rest = append(rest, c)
			continue
		}
		seen[c.Object.Key] = struct{}{}
		if rest != nil {
			wave = append(wave, c)
		}
	}
	if rest == nil {
		return changes, nil
	}
	return wave, rest
}

// plan decides what record, if any, a change needs. Caller holds mu.
func (p *Publisher) plan(ctx context.Context, c Change) (*outMsg, Result, error) {
	var res Result
	o := &c.Object
	k := o.Key
	if subj := p.opts.Names.ChangeSubject(p.opts.Cluster, k.ref("")); len(subj) > bus.MaxSubjectLen {
		// The server would refuse the control line and nats.go would close
		// the connection for good, stopping every cluster's publishing.
		p.reject(RejectSubjectTooLong, o, len(subj), "subject too long")
		res.Rejected++
		return nil, res, nil
	}
	if !p.recorded(k) {
		if !c.Delete {
			p.metrics.rejected.WithLabelValues(RejectKindNotRecorded).Inc()
			p.log.Warn("not recording an object: its kind is not on ingest's allowlist (Secrets and kinds the mesh does not read are never written to the history)",
				"reason", RejectKindNotRecorded, "source", o.Source, "kind", k.KindLabel(), "namespace", k.Namespace, "name", k.Name)
			res.Rejected++
		} else {
			res.Unchanged++
		}
		return nil, res, nil
	}
	cur := p.state[k]
	live := cur != nil && cur.live
	var prevSeq uint64
	if cur != nil {
		prevSeq = cur.seq
	}
	var rec *pb.ChangeRecord
	m := &outMsg{change: c, key: k}
	if !c.Delete {
		rv := o.ResourceVersion
		if rv == "" {
			rv = ContentVersion(o.JSON)
		}
		// The same resourceVersion is the same object; with a content
		// version, so is the same content under another one.
		same := cur != nil && (cur.rv == rv || (o.ContentVersion != "" && cur.content == o.ContentVersion))
		if live && same && (o.UID == "" || o.UID == cur.uid) {
			res.Unchanged++
			return nil, res, nil
		}
		if len(o.JSON) == 0 {
			p.reject(RejectEmptyObject, o, 0, "object has no JSON")
			res.Rejected++
			return nil, res, nil
		}
		uid := o.UID
		switch {
		case uid != "":
		case live:
			uid = cur.uid
		default:
			uid = SynthUID(p.opts.Cluster, k, prevSeq)
		}
		m.op = pb.Op_OP_ADD
		if live {
			m.op = pb.Op_OP_UPDATE
		}
		rec = p.record(k, o.Version, m.op, uid, rv, o.JSON, o.Source)
	} else {
		if !live {
			res.Unchanged++
			return nil, res, nil
		}
		rv := o.ResourceVersion
		if rv == "" {
			rv = cur.rv
		}
		version := o.Version
		if version == "" {
			version = cur.version
		}
		source := o.Source
		if source == "" {
			source = cur.source
		}
		obj := o.JSON
		if obj == nil {
			var err error
			if obj, err = p.lastObject(ctx, k); err != nil {
				return nil, res, err
			}
		}
		m.op = pb.Op_OP_DELETE
		rec = p.record(k, version, m.op, cur.uid, rv, obj, source)
	}
	m.e = entry{uid: rec.Uid, rv: rec.ResourceVersion, version: rec.Ref.Version, source: rec.Source, live: m.op != pb.Op_OP_DELETE}
	if m.op != pb.Op_OP_DELETE && o.ContentVersion != "" {
		m.e.content = o.ContentVersion
	}
	m.id = MsgID(p.opts.Cluster, rec.Uid, rec.ResourceVersion, m.op, prevSeq)
	m.msg = &nats.Msg{Subject: p.opts.Names.ChangeSubject(p.opts.Cluster, rec.Ref), Header: nats.Header{}}
	m.msg.Header[jetstream.MsgIDHeader] = []string{m.id}
	m.msg.Header[jetstream.ExpectedStreamHeader] = []string{p.opts.Names.ChangesStream()}
	m.msg.Header[jetstream.ExpectedLastSubjSeqHeader] = []string{strconv.FormatUint(prevSeq, 10)}
	if m.e.content != "" {
		m.msg.Header[ContentVersionHeader] = []string{m.e.content}
	}
	data, err := proto.Marshal(rec)
	if err != nil {
		return nil, res, fmt.Errorf("marshal change record %s: %w", k, err)
	}
	size := len(data) + headerSize(m.msg.Header)
	if size > p.maxSize && m.op == pb.Op_OP_DELETE && len(rec.Object) > 0 {
		// A delete needs the key and uid; drop the last object rather
		// than the delete.
		p.log.Warn("delete record too large with its last object; publishing it without", "key", k.String(), "size", size, "limit", p.maxSize)
		rec.Object = nil
		if data, err = proto.Marshal(rec); err != nil {
			return nil, res, fmt.Errorf("marshal change record %s: %w", k, err)
		}
		size = len(data) + headerSize(m.msg.Header)
	}
	if size > p.maxSize {
		p.reject(RejectTooLarge, o, size, "record exceeds the stream's max message size")
		res.Rejected++
		return nil, res, nil
	}
	m.msg.Data = data
	return m, res, nil
}

func (p *Publisher) record(k Key, version string, op pb.Op, uid, rv string, obj []byte, source string) *pb.ChangeRecord {
	return &pb.ChangeRecord{
		Cluster:         p.opts.Cluster,
		Ref:             k.ref(version),
		Op:              op,
		Uid:             uid,
		ResourceVersion: rv,
		ObservedAt:      timestamppb.New(p.opts.Now()),
		Object:          obj,
		Source:          source,
	}
}

func (p *Publisher) reject(reason string, o *Object, size int, msg string) {
	p.metrics.rejected.WithLabelValues(reason).Inc()
	limit := p.maxSize
	if reason == RejectSubjectTooLong {
		limit = bus.MaxSubjectLen
	}
	name := o.Key.Name
	if len(name) > 64 {
		name = name[:64] + "..."
	}
	p.log.Error("rejecting change record: "+msg, "reason", reason, "source", o.Source,
		"kind", o.Key.KindLabel(), "namespace", o.Key.Namespace, "name", name,
		"size", size, "limit", limit)
}

// headerSize is the wire size of a NATS header block, which counts against
// the stream's max message size.
func headerSize(h nats.Header) int {
	n := len("NATS/1.0\r\n\r\n")
	for k, vs := range h {
		for _, v := range vs {
			n += len(k) + len(": ") + len(v) + len("\r\n")
		}
	}
	return n
}

// publishAll stores every record, retrying failures with backoff until they
// succeed or ctx ends. It returns the changes to re-plan after conflicts:
// the source's current view (Options.Reread), or the queued change.
func (p *Publisher) publishAll(ctx context.Context, out []*outMsg) ([]Change, Result, error) {
	var (
		res    Result
		replan []Change
	)
	err := svc.Retry(ctx, svc.RetryOptions{
		First: p.opts.RetryMin, Max: p.opts.RetryMax,
		Log: p.log, Msg: "publish failed, retrying", Failures: p.metrics.retries.WithLabelValues(retryPublish),
	}, func() error {
		failed, conflicts, lastErr, err := p.pipeline(ctx, out, &res)
		if err != nil {
			return err // ctx ended
		}
		for _, m := range conflicts {
			again, err := p.resolveConflict(ctx, m, &res)
			if err != nil {
				failed = append(failed, m)
				lastErr = err
				continue
			}
			if !again {
				continue
			}
			c := m.change
			if p.opts.Reread != nil {
				// The queued change may be older than what the other
				// writer stored: plan the source's view as it is now.
				var ok bool
				if c, ok = p.opts.Reread(m.key); !ok {
					p.log.Warn("object was changed by another writer and the source has nothing for it now; dropping the queued change", "key", m.key.String())
					continue
				}
			}
			replan = append(replan, c)
		}
		if len(failed) == 0 {
			return nil
		}
		p.metrics.errors.Add(float64(len(failed)))
		out = failed
		return fmt.Errorf("%d records, the first %s: %w", len(failed), failed[0].key, lastErr)
	})
	if err != nil {
		return nil, res, err
	}
	return replan, res, nil
}

// pipeline publishes out asynchronously with at most MaxInFlight awaiting
// their ack, and sorts the outcomes. Records of one object never meet in
// one call (see splitWave), so their order is kept.
func (p *Publisher) pipeline(ctx context.Context, out []*outMsg, res *Result) (failed, conflicts []*outMsg, lastErr, err error) {
	inflight := make([]*outMsg, 0, min(len(out), p.opts.MaxInFlight))
	head := 0
	defer func() { p.metrics.inflight.Set(0) }()
	// One timer bounds each ack wait; a publish whose ack does not come is
	// retried (with the same id, so a late store is deduplicated).
	timeout := time.NewTimer(p.opts.AckTimeout)
	defer timeout.Stop()
	settle := func(m *outMsg) error {
		timeout.Reset(p.opts.AckTimeout)
		select {
		case <-timeout.C:
			failed = append(failed, m)
			lastErr = fmt.Errorf("no ack within %s", p.opts.AckTimeout)
		case ack := <-m.fut.Ok():
			p.stored(m, ack.Sequence, ack.Duplicate, res)
		case perr := <-m.fut.Err():
			var apiErr *jetstream.APIError
			switch {
			case errors.As(perr, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
				apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
				conflicts = append(conflicts, m)
			case errors.As(perr, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum:
				// The stream's limit shrank since Start.
				p.reject(RejectTooLarge, &m.change.Object, len(m.msg.Data)+headerSize(m.msg.Header), "stream refused the record as too large")
				res.Rejected++
			default:
				failed = append(failed, m)
				lastErr = perr
			}
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	for _, m := range out {
		if len(inflight)-head == p.opts.MaxInFlight {
			if err := settle(inflight[head]); err != nil {
				return nil, nil, nil, err
			}
			head++
		}
		fut, perr := p.js.PublishMsgAsync(m.msg)
		if perr != nil {
			failed = append(failed, m)
			lastErr = perr
			continue
		}
		m.fut = fut
		inflight = append(inflight, m)
		p.metrics.inflight.Set(float64(len(inflight) - head))
	}
	for ; head < len(inflight); head++ {
		if err := settle(inflight[head]); err != nil {
			return nil, nil, nil, err
		}
		p.metrics.inflight.Set(float64(len(inflight) - head - 1))
	}
	return failed, conflicts, lastErr, nil
}

// stored records that m is its subject's last record, at seq.
func (p *Publisher) stored(m *outMsg, seq uint64, duplicate bool, res *Result) {
	e := m.e
	e.seq = seq
	p.setEntry(m.key, e)
	if duplicate {
		res.Deduplicated++
		p.metrics.deduplicated.Inc()
	} else {
		res.Published++
		p.metrics.published.WithLabelValues(m.key.KindLabel(), opName(m.op)).Inc()
	}
	p.metrics.objects.Set(float64(p.live))
	p.metrics.lastSeq.Set(float64(p.lastSeq))
}

// resolveConflict handles a publish refused because the subject's last
// sequence was not the one expected: either our own record is already there
// (a retry after the dedup window), or someone else wrote the subject, and
// the object must be planned again against what they wrote (from the
// source's current view, see publishAll).
func (p *Publisher) resolveConflict(ctx context.Context, m *outMsg, res *Result) (replan bool, err error) {
	raw, err := bus.LastMsg(ctx, p.stream, m.msg.Subject)
	if err != nil {
		return false, err
	}
	if raw != nil && raw.Header.Get(jetstream.MsgIDHeader) == m.id {
		p.stored(m, raw.Sequence, true, res)
		return false, nil
	}
	p.metrics.conflicts.Inc()
	if raw == nil {
		// The subject was purged: start it again.
		if cur := p.state[m.key]; cur != nil {
			if cur.live {
				p.live--
			}
			delete(p.state, m.key)
		}
		p.metrics.objects.Set(float64(p.live))
		p.log.Warn("object's subject was emptied by someone else; re-planning", "key", m.key.String())
		return true, nil
	}
	p.log.Warn("object was changed by another writer; re-planning", "key", m.key.String(), "seq", raw.Sequence)
	p.absorb(raw.Subject, raw.Data, raw.Header.Get(ContentVersionHeader), raw.Sequence)
	p.metrics.objects.Set(float64(p.live))
	return true, nil
}

// lastObject returns the object of the subject's last record, retrying read
// errors until ctx ends. A record that cannot be read yields nil.
func (p *Publisher) lastObject(ctx context.Context, k Key) ([]byte, error) {
	subj := p.opts.Names.ChangeSubject(p.opts.Cluster, k.ref(""))
	var obj []byte
	err := svc.Retry(ctx, svc.RetryOptions{
		First: p.opts.RetryMin, Max: p.opts.RetryMax,
		Log: p.log, Msg: "reading an object's last record failed, retrying", Attrs: []any{"key", k.String()},
		Failures: p.metrics.retries.WithLabelValues(retryReadLast),
	}, func() error {
		raw, err := bus.LastMsg(ctx, p.stream, subj)
		if err != nil || raw == nil {
			return err
		}
		var rec pb.ChangeRecord
		if err := proto.Unmarshal(raw.Data, &rec); err != nil {
			p.log.Warn("last record of a deleted object is undecodable; deleting without it", "key", k.String(), "err", err)
			return nil
		}
		obj = rec.GetObject()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return obj, nil
}
