package debouncer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pilotwire/pilotwire/pkg/debounce"
	"github.com/pilotwire/pilotwire/pkg/svc"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// emitted is a request handed to the request writer with the ack (reply)
// subjects of the change messages it merged, to acknowledge once it is
// stored.
type emitted struct {
	req  *debounce.Request
	pr   *pb.PushRequest // req on the wire, within the size bound
	acks []string
}

// requestWriter writes one PushRequest at a time to the PUSHES stream,
// retrying until it is durable, then acknowledges the request's change
// records. It runs beside the loop, which hands it emitted requests and
// hears back when each is written.
//
// Writes are fenced: each publish expects the stream's last sequence to be
// the one this instance last saw (read at take-over, then its own
// publishes'). If anything else wrote to PUSHES meanwhile, JetStream
// rejects the publish: another instance is or was active, so this one has
// lost the lease whatever it believes, and it stops.
type requestWriter struct {
	// set at construction
	nc      *nats.Conn // acks go to the changes' reply subjects
	js      jetstream.JetStream
	stream  jetstream.Stream // PUSHES, to recognise an own publish whose ack was lost
	subject string
	log     *slog.Logger
	m       *metrics
	hooks   *testHooks

	// owned by run
	lastSeq uint64 // the PUSHES stream's last sequence as this instance knows it
}

// errFenced means a publish was rejected because another instance wrote
// to PUSHES: this instance must stand by.
var errFenced = errors.New("push request rejected: another debouncer wrote to PUSHES (lease lost)")

// run writes what in hands it until ctx ends or a write is fenced; it
// returns errFenced then, nil when ctx ended.
func (w *requestWriter) run(ctx context.Context, in <-chan emitted, out chan<- emitted) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case e := <-in:
			if err := w.write(ctx, e); err != nil {
				if errors.Is(err, errFenced) {
					return err
				}
				return nil // ctx ended; the changes stay un-acked and are redelivered
			}
			select {
			case out <- e:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

func (w *requestWriter) write(ctx context.Context, e emitted) error {
	pr := e.pr
	pr.EmittedAt = timestamppb.Now()
	b, err := proto.Marshal(pr)
	if err != nil {
		return fmt.Errorf("marshal push request: %w", err)
	}
	msgID := "push-" + strconv.FormatUint(pr.GetThroughSeq(), 10)
	fenced := false
	err = svc.Retry(ctx, svc.RetryOptions{
		First: 100 * time.Millisecond, Max: 5 * time.Second,
		Log: w.log, Msg: "publish push request, retrying", Attrs: []any{"through_seq", pr.GetThroughSeq()},
		Failures: w.m.publishErrors,
	}, func() error {
		pubCtx := ctx
		if w.hooks != nil && w.hooks.publishCtx != nil {
			pubCtx = w.hooks.publishCtx(ctx)
		}
		pctx, cancel := context.WithTimeout(pubCtx, 5*time.Second)
		defer cancel()
		ack, err := w.js.Publish(pctx, w.subject, b, jetstream.WithMsgID(msgID), jetstream.WithExpectLastSequence(w.lastSeq))
		if wrongLastSeq(err) {
			// A retry of a publish that landed (its ack was lost) finds its
			// own message next; anything else is another writer.
			if mine, rerr := w.landed(pctx, b); rerr != nil {
				return rerr
			} else if !mine {
				fenced = true
				return nil
			}
			ack, err = &jetstream.PubAck{Sequence: w.lastSeq + 1}, nil
		}
		if err != nil {
			return err
		}
		w.lastSeq = ack.Sequence
		w.m.published.Inc()
		w.m.lastThroughSeq.Set(float64(pr.GetThroughSeq()))
		w.log.Debug("push request published", "seq", ack.Sequence, "through_seq", pr.GetThroughSeq(), "merged", pr.GetMergedEvents(), "full", pr.GetFull(), "duplicate", ack.Duplicate)
		return nil
	})
	if err != nil {
		return err // ctx ended
	}
	if fenced {
		w.m.fenced.Inc()
		w.log.Warn("push request rejected: another instance wrote to PUSHES since this one last did; the lease is lost, standing by",
			"through_seq", pr.GetThroughSeq(), "expected_last_seq", w.lastSeq)
		return errFenced
	}
	// Acknowledge every change; the last ack is confirmed by the server, and
	// acks on one connection are processed in order, so when it returns all
	// of them are recorded.
	for i, reply := range e.acks {
		if i == len(e.acks)-1 {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := w.nc.RequestWithContext(actx, reply, ackBody)
			cancel()
			if err != nil {
				w.log.Warn("confirm change acks (they will be redelivered and skipped)", "err", err)
			}
			continue
		}
		if err := w.nc.Publish(reply, ackBody); err != nil {
			w.log.Warn("ack change", "err", err)
		}
	}
	return nil
}

// ackBody acknowledges a JetStream message when sent to its reply subject.
var ackBody = []byte("+ACK")

// wrongLastSeq reports whether err is JetStream's expected-last-sequence
// rejection.
func wrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// landed reports whether the message right after the last one this
// instance knows is b, its own earlier try.
func (w *requestWriter) landed(ctx context.Context, b []byte) (bool, error) {
	msg, err := w.stream.GetMsg(ctx, w.lastSeq+1)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read push request %d: %w", w.lastSeq+1, err)
	}
	return bytes.Equal(msg.Data, b), nil
}
