package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// scanOptions bound a scan of a stream.
type scanOptions struct {
	// Filter subjects; none is the whole stream.
	Filter []string
	// Start at this time (zero: the beginning).
	Since time.Time
	// Start at this sequence (0: the beginning; Since wins when both are set).
	FromSeq uint64
	// Stop after this sequence (0: the stream's last as of the scan's start).
	ThroughSeq uint64
	// Stop before the first message stored after this time (zero: none).
	Until time.Time
	// LastPerSubject reads only the last message of each subject (the
	// current state of each object of a change stream).
	LastPerSubject bool
}

// scanStream calls fn for every message of the stream within o, in
// sequence order, with an ordered consumer (nothing is left behind on the
// server). It reads what the stream held when it started and returns.
func scanStream(ctx context.Context, s jetstream.Stream, o scanOptions, fn func(jetstream.Msg, *jetstream.MsgMetadata) error) error {
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("stream info: %w", err)
	}
	last := info.State.LastSeq
	if o.ThroughSeq != 0 && o.ThroughSeq < last {
		last = o.ThroughSeq
	}
	if last == 0 || last < info.State.FirstSeq {
		return nil
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: o.Filter}
	if o.LastPerSubject {
		cfg.DeliverPolicy = jetstream.DeliverLastPerSubjectPolicy
	}
	if o.FromSeq > last {
		return nil
	}
	if o.FromSeq > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, o.FromSeq
	}
	if !o.Since.IsZero() {
		cfg.DeliverPolicy = jetstream.DeliverByStartTimePolicy
		since := o.Since
		cfg.OptStartTime = &since
	}
	cons, err := s.OrderedConsumer(ctx, cfg)
	if err != nil {
		return fmt.Errorf("ordered consumer: %w", err)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		batch, err := cons.FetchNoWait(1024)
		if err != nil {
			return fmt.Errorf("fetch: %w", err)
		}
		done, err := scanBatch(batch, last, o.Until, fn)
		if done || err != nil {
			return err
		}
	}
}

// scanBatch hands fn the messages of one batch; done says the scan is
// over (past last or until, or nothing more to read). The batch is always
// read to its end, so that its fetch ends too.
func scanBatch(batch jetstream.MessageBatch, last uint64, until time.Time, fn func(jetstream.Msg, *jetstream.MsgMetadata) error) (done bool, err error) {
	defer func() {
		for range batch.Messages() {
		}
	}()
	n := 0
	for msg := range batch.Messages() {
		n++
		md, err := msg.Metadata()
		if err != nil {
			return true, err
		}
		if md.Sequence.Stream > last || (!until.IsZero() && md.Timestamp.After(until)) {
			return true, nil
		}
		if err := fn(msg, md); err != nil {
			return true, err
		}
		if md.Sequence.Stream == last || md.NumPending == 0 {
			return true, nil
		}
	}
	if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
		return true, fmt.Errorf("fetch: %w", err)
	}
	return n == 0, nil
}
