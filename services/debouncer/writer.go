package debouncer

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pilotwire/pilotwire/pkg/debounce"
	"github.com/pilotwire/pilotwire/pkg/svc"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// emitted is a request handed to the request writer with the change
// messages it merged, to acknowledge once it is stored.
type emitted struct {
	req  *debounce.Request
	pr   *pb.PushRequest // req on the wire, within the size bound
	msgs []jetstream.Msg
}

// requestWriter writes one PushRequest at a time to the PUSHES stream,
// retrying until it is durable, then acknowledges the request's change
// records. It runs beside the loop, which hands it emitted requests and
// hears back when each is written.
type requestWriter struct {
	js      jetstream.JetStream
	subject string
	log     *slog.Logger
	m       *metrics
	hooks   *testHooks
}

func (w *requestWriter) run(ctx context.Context, in <-chan emitted, out chan<- emitted) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-in:
			if err := w.write(ctx, e); err != nil {
				return // ctx ended; the changes stay un-acked and are redelivered
			}
			select {
			case out <- e:
			case <-ctx.Done():
				return
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
		ack, err := w.js.Publish(pctx, w.subject, b, jetstream.WithMsgID(msgID))
		if err != nil {
			return err
		}
		w.m.published.Inc()
		w.m.lastThroughSeq.Set(float64(pr.GetThroughSeq()))
		w.log.Debug("push request published", "seq", ack.Sequence, "through_seq", pr.GetThroughSeq(), "merged", pr.GetMergedEvents(), "full", pr.GetFull(), "duplicate", ack.Duplicate)
		return nil
	})
	if err != nil {
		return err // ctx ended
	}
	// Acknowledge every change; the last ack is confirmed by the server, and
	// acks on one connection are processed in order, so when it returns all
	// of them are recorded.
	for i, msg := range e.msgs {
		if i == len(e.msgs)-1 {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := msg.DoubleAck(actx)
			cancel()
			if err != nil {
				w.log.Warn("confirm change acks (they will be redelivered and skipped)", "err", err)
			}
			continue
		}
		if err := msg.Ack(); err != nil {
			w.log.Warn("ack change", "err", err)
		}
	}
	return nil
}
