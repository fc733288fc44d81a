package svc

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/pkg/bus"
)

// Streams opens the streams and buckets a service needs at start. A
// stream that is missing, or a cluster still electing its leaders, is
// waited for with backoff, each try bounded (streamTryTimeout): each
// failed try is logged and counted
// (pilotwire_stream_ensure_retries_total{name}), and the service's
// readiness says what it waits for. It never gives up before ctx ends.
//
// A stream or bucket that exists is never changed: where its config
// differs from the declaration (pkg/bus), each field is logged and set in
// pilotwire_stream_drift{name,field}, and the service goes on with what
// the server has. `pilotwire streams apply` changes it.
type Streams struct {
	// OnWait hears of each failed try (name of the stream or bucket, the
	// error). The default marks the service not ready with the reason; a
	// service that tracks readiness per part sets its own. Set before use.
	OnWait func(name string, err error)

	// set at construction
	js      jetstream.JetStream
	log     *slog.Logger
	retries *prometheus.CounterVec
	drift   *prometheus.GaugeVec
}

// Backoff of the waits for a stream or bucket, and the bound of each try.
// A try is bounded by the service, not by nats.go's 5 s default: when
// services start together, the server can leave one of two concurrent
// creations of a stream unanswered (nats.go#949), and the try after it
// finds the stream the other created. A lost try then costs 2 s, not 5;
// an answer slower than that is retried, and the retry finds what the
// slow try created.
const (
	streamRetryFirst = 250 * time.Millisecond
	streamRetryMax   = 5 * time.Second
	streamTryTimeout = 2 * time.Second
)

// NewStreams returns the Streams of a service; its metrics go on d.Reg
// (registered once per registry). It does no I/O.
func NewStreams(d Deps) *Streams {
	health := d.Health
	if health == nil {
		health = &Health{}
	}
	s := &Streams{js: d.JS, log: d.Log}
	s.OnWait = func(name string, err error) { health.SetNotReady("waiting for " + name + ": " + err.Error()) }
	var reg prometheus.Registerer
	if d.Reg != nil {
		reg = d.Reg
	}
	s.retries = registerOnce(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "pilotwire_stream_ensure_retries_total",
		Help: "Failed tries to open or create a stream or bucket at start (missing, or the NATS cluster electing), retried after a backoff.",
	}, []string{"name"}))
	s.drift = registerOnce(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "pilotwire_stream_drift",
		Help: "1 for each field in which a stream or bucket on the server differs from this service's declaration (left unchanged; pilotwire streams apply changes it).",
	}, []string{"name", "field"}))
	return s
}

// Stream opens the stream cfg declares, creating it when missing.
func (s *Streams) Stream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	var st jetstream.Stream
	err := s.retry(ctx, cfg.Name, func(ctx context.Context) error {
		var err error
		st, err = bus.EnsureStream(ctx, s.js, cfg)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.report(cfg.Name, bus.StreamDrift(st.CachedInfo().Config, cfg))
	return st, nil
}

// KV opens the bucket cfg declares, creating it when missing.
func (s *Streams) KV(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	var have jetstream.KeyValueConfig
	err := s.retry(ctx, cfg.Bucket, func(ctx context.Context) error {
		var err error
		kv, err = bus.EnsureKV(ctx, s.js, cfg)
		if err != nil {
			return err
		}
		have, err = bus.BucketConfig(ctx, kv)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.report(cfg.Bucket, bus.BucketDrift(have, cfg))
	return kv, nil
}

// ObjectStore opens the object store cfg declares, creating it when
// missing.
func (s *Streams) ObjectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	var obj jetstream.ObjectStore
	var have jetstream.ObjectStoreConfig
	err := s.retry(ctx, cfg.Bucket, func(ctx context.Context) error {
		var err error
		obj, err = bus.EnsureObjectStore(ctx, s.js, cfg)
		if err != nil {
			return err
		}
		have, err = bus.ObjectStoreConfig(ctx, obj)
		return err
	})
	if err != nil {
		return nil, err
	}
	s.report(cfg.Bucket, bus.ObjectStoreDrift(have, cfg))
	return obj, nil
}

func (s *Streams) report(name string, drift []bus.Drift) {
	for _, d := range drift {
		s.drift.WithLabelValues(name, d.Field).Set(1)
		s.log.Warn("stream config differs from its declaration; left unchanged (run pilotwire streams apply to change it)",
			"name", name, "field", d.Field, "have", d.Have, "want", d.Want)
	}
}

func (s *Streams) retry(ctx context.Context, name string, attempt func(context.Context) error) error {
	return RetryTimed(ctx, RetryOptions{
		First: streamRetryFirst, Max: streamRetryMax,
		Log: s.log, Msg: "stream or bucket not available yet (missing, or the NATS cluster electing its leaders), retrying",
		Attrs: []any{"name", name}, Failures: s.retries.WithLabelValues(name),
		OnFailure: func(err error, _ time.Duration) {
			if s.OnWait != nil {
				s.OnWait(name, err)
			}
		},
	}, streamTryTimeout, attempt)
}

// registerOnce registers c on reg, or returns the collector of the same
// description already there (several parts of one service share a
// registry).
func registerOnce[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if reg == nil {
		return c
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		panic(err)
	}
	return c
}
