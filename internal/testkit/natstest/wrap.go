package natstest

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Hooks replace what a wrapped JetStream context hands out. Each hook gets
// the bucket or stream the real context opened and returns what the caller
// sees; a nil hook passes it through. A hook runs only when opening
// succeeded.
type Hooks struct {
	KeyValue    func(jetstream.KeyValue) jetstream.KeyValue
	Stream      func(jetstream.Stream) jetstream.Stream
	ObjectStore func(jetstream.ObjectStore) jetstream.ObjectStore
	// Fail, when set, runs before every opening call with the method's
	// name and the bucket or stream named; an error it returns is the
	// call's, and nothing is opened (a stream without a leader, a
	// timeout).
	Fail func(method, name string) error
	// Unanswered, when set, runs after Fail with the call's context; when
	// it returns true the request is lost on its way, as one the server
	// never answers (nats.go#949: one of two concurrent creations of a
	// stream can go unanswered): nothing is opened or created, and the
	// call returns what nats.go returns then, the context's error once ctx
	// ends, or context.DeadlineExceeded after the context's
	// DefaultTimeout when ctx has no deadline, as nats.go bounds such a
	// call itself.
	Unanswered func(ctx context.Context, method, name string) bool
}

// Wrap returns a JetStream context that behaves as js except that every
// key-value bucket, stream and object store it opens, whichever method
// opens it, goes through h first. Tests inject faults into one bucket this
// way (a lease whose renewals hang, a registry whose purges fail), or make
// opening fail.
//
// The wrapper does not embed jetstream.JetStream: each method is written
// out, so a method nats.go adds to the interface stops the build here
// instead of bypassing the hooks, and TestWrapHooksEveryOpen fails when a
// method that returns a bucket or stream has no case there.
func Wrap(js jetstream.JetStream, h Hooks) jetstream.JetStream {
	return &wrappedJS{js: js, h: h}
}

type wrappedJS struct {
	js jetstream.JetStream
	h  Hooks
}

var _ jetstream.JetStream = (*wrappedJS)(nil)

func (w *wrappedJS) fail(ctx context.Context, method, name string) error {
	if w.h.Fail != nil {
		if err := w.h.Fail(method, name); err != nil {
			return err
		}
	}
	if w.h.Unanswered == nil || !w.h.Unanswered(ctx, method, name) {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, w.js.Options().DefaultTimeout)
		defer cancel()
	}
	<-ctx.Done()
	return ctx.Err()
}

func (w *wrappedJS) kv(kv jetstream.KeyValue, err error) (jetstream.KeyValue, error) {
	if err != nil || w.h.KeyValue == nil {
		return kv, err
	}
	return w.h.KeyValue(kv), nil
}

func (w *wrappedJS) stream(s jetstream.Stream, err error) (jetstream.Stream, error) {
	if err != nil || w.h.Stream == nil {
		return s, err
	}
	return w.h.Stream(s), nil
}

func (w *wrappedJS) obj(o jetstream.ObjectStore, err error) (jetstream.ObjectStore, error) {
	if err != nil || w.h.ObjectStore == nil {
		return o, err
	}
	return w.h.ObjectStore(o), nil
}

// Opening a key-value bucket.

func (w *wrappedJS) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	if err := w.fail(ctx, "KeyValue", bucket); err != nil {
		return nil, err
	}
	return w.kv(w.js.KeyValue(ctx, bucket))
}

func (w *wrappedJS) CreateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if err := w.fail(ctx, "CreateKeyValue", cfg.Bucket); err != nil {
		return nil, err
	}
	return w.kv(w.js.CreateKeyValue(ctx, cfg))
}

func (w *wrappedJS) UpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if err := w.fail(ctx, "UpdateKeyValue", cfg.Bucket); err != nil {
		return nil, err
	}
	return w.kv(w.js.UpdateKeyValue(ctx, cfg))
}

func (w *wrappedJS) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	if err := w.fail(ctx, "CreateOrUpdateKeyValue", cfg.Bucket); err != nil {
		return nil, err
	}
	return w.kv(w.js.CreateOrUpdateKeyValue(ctx, cfg))
}

// Opening a stream.

func (w *wrappedJS) Stream(ctx context.Context, stream string) (jetstream.Stream, error) {
	if err := w.fail(ctx, "Stream", stream); err != nil {
		return nil, err
	}
	return w.stream(w.js.Stream(ctx, stream))
}

func (w *wrappedJS) CreateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	if err := w.fail(ctx, "CreateStream", cfg.Name); err != nil {
		return nil, err
	}
	return w.stream(w.js.CreateStream(ctx, cfg))
}

func (w *wrappedJS) UpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	if err := w.fail(ctx, "UpdateStream", cfg.Name); err != nil {
		return nil, err
	}
	return w.stream(w.js.UpdateStream(ctx, cfg))
}

func (w *wrappedJS) CreateOrUpdateStream(ctx context.Context, cfg jetstream.StreamConfig) (jetstream.Stream, error) {
	if err := w.fail(ctx, "CreateOrUpdateStream", cfg.Name); err != nil {
		return nil, err
	}
	return w.stream(w.js.CreateOrUpdateStream(ctx, cfg))
}

// Opening an object store.

func (w *wrappedJS) ObjectStore(ctx context.Context, bucket string) (jetstream.ObjectStore, error) {
	if err := w.fail(ctx, "ObjectStore", bucket); err != nil {
		return nil, err
	}
	return w.obj(w.js.ObjectStore(ctx, bucket))
}

func (w *wrappedJS) CreateObjectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	if err := w.fail(ctx, "CreateObjectStore", cfg.Bucket); err != nil {
		return nil, err
	}
	return w.obj(w.js.CreateObjectStore(ctx, cfg))
}

func (w *wrappedJS) UpdateObjectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	if err := w.fail(ctx, "UpdateObjectStore", cfg.Bucket); err != nil {
		return nil, err
	}
	return w.obj(w.js.UpdateObjectStore(ctx, cfg))
}

func (w *wrappedJS) CreateOrUpdateObjectStore(ctx context.Context, cfg jetstream.ObjectStoreConfig) (jetstream.ObjectStore, error) {
	if err := w.fail(ctx, "CreateOrUpdateObjectStore", cfg.Bucket); err != nil {
		return nil, err
	}
	return w.obj(w.js.CreateOrUpdateObjectStore(ctx, cfg))
}

// Everything else passes through.

func (w *wrappedJS) AccountInfo(ctx context.Context) (*jetstream.AccountInfo, error) {
	return w.js.AccountInfo(ctx)
}

func (w *wrappedJS) Conn() *nats.Conn { return w.js.Conn() }

func (w *wrappedJS) Options() jetstream.JetStreamOptions { return w.js.Options() }

func (w *wrappedJS) DeleteKeyValue(ctx context.Context, bucket string) error {
	return w.js.DeleteKeyValue(ctx, bucket)
}

func (w *wrappedJS) KeyValueStoreNames(ctx context.Context) jetstream.KeyValueNamesLister {
	return w.js.KeyValueStoreNames(ctx)
}

func (w *wrappedJS) KeyValueStores(ctx context.Context) jetstream.KeyValueLister {
	return w.js.KeyValueStores(ctx)
}

func (w *wrappedJS) DeleteObjectStore(ctx context.Context, bucket string) error {
	return w.js.DeleteObjectStore(ctx, bucket)
}

func (w *wrappedJS) ObjectStoreNames(ctx context.Context) jetstream.ObjectStoreNamesLister {
	return w.js.ObjectStoreNames(ctx)
}

func (w *wrappedJS) ObjectStores(ctx context.Context) jetstream.ObjectStoresLister {
	return w.js.ObjectStores(ctx)
}

func (w *wrappedJS) StreamNameBySubject(ctx context.Context, subject string) (string, error) {
	return w.js.StreamNameBySubject(ctx, subject)
}

func (w *wrappedJS) DeleteStream(ctx context.Context, stream string) error {
	return w.js.DeleteStream(ctx, stream)
}

func (w *wrappedJS) ListStreams(ctx context.Context, opts ...jetstream.StreamListOpt) jetstream.StreamInfoLister {
	return w.js.ListStreams(ctx, opts...)
}

func (w *wrappedJS) StreamNames(ctx context.Context, opts ...jetstream.StreamListOpt) jetstream.StreamNameLister {
	return w.js.StreamNames(ctx, opts...)
}

func (w *wrappedJS) CreateOrUpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	return w.js.CreateOrUpdateConsumer(ctx, stream, cfg)
}

func (w *wrappedJS) CreateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	return w.js.CreateConsumer(ctx, stream, cfg)
}

func (w *wrappedJS) UpdateConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.Consumer, error) {
	return w.js.UpdateConsumer(ctx, stream, cfg)
}

func (w *wrappedJS) OrderedConsumer(ctx context.Context, stream string, cfg jetstream.OrderedConsumerConfig) (jetstream.Consumer, error) {
	return w.js.OrderedConsumer(ctx, stream, cfg)
}

func (w *wrappedJS) Consumer(ctx context.Context, stream string, consumer string) (jetstream.Consumer, error) {
	return w.js.Consumer(ctx, stream, consumer)
}

func (w *wrappedJS) DeleteConsumer(ctx context.Context, stream string, consumer string) error {
	return w.js.DeleteConsumer(ctx, stream, consumer)
}

func (w *wrappedJS) PauseConsumer(ctx context.Context, stream string, consumer string, pauseUntil time.Time) (*jetstream.ConsumerPauseResponse, error) {
	return w.js.PauseConsumer(ctx, stream, consumer, pauseUntil)
}

func (w *wrappedJS) ResumeConsumer(ctx context.Context, stream string, consumer string) (*jetstream.ConsumerPauseResponse, error) {
	return w.js.ResumeConsumer(ctx, stream, consumer)
}

func (w *wrappedJS) ResetConsumer(ctx context.Context, stream, consumer string) (*jetstream.ConsumerResetResponse, error) {
	return w.js.ResetConsumer(ctx, stream, consumer)
}

func (w *wrappedJS) ResetConsumerToSequence(ctx context.Context, stream, consumer string, seq uint64) (*jetstream.ConsumerResetResponse, error) {
	return w.js.ResetConsumerToSequence(ctx, stream, consumer, seq)
}

func (w *wrappedJS) CreateOrUpdatePushConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.PushConsumer, error) {
	return w.js.CreateOrUpdatePushConsumer(ctx, stream, cfg)
}

func (w *wrappedJS) CreatePushConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.PushConsumer, error) {
	return w.js.CreatePushConsumer(ctx, stream, cfg)
}

func (w *wrappedJS) UpdatePushConsumer(ctx context.Context, stream string, cfg jetstream.ConsumerConfig) (jetstream.PushConsumer, error) {
	return w.js.UpdatePushConsumer(ctx, stream, cfg)
}

func (w *wrappedJS) PushConsumer(ctx context.Context, stream string, consumer string) (jetstream.PushConsumer, error) {
	return w.js.PushConsumer(ctx, stream, consumer)
}

func (w *wrappedJS) Publish(ctx context.Context, subject string, payload []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	return w.js.Publish(ctx, subject, payload, opts...)
}

func (w *wrappedJS) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	return w.js.PublishMsg(ctx, msg, opts...)
}

func (w *wrappedJS) PublishAsync(subject string, payload []byte, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	return w.js.PublishAsync(subject, payload, opts...)
}

func (w *wrappedJS) PublishMsgAsync(msg *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	return w.js.PublishMsgAsync(msg, opts...)
}

func (w *wrappedJS) PublishAsyncPending() int { return w.js.PublishAsyncPending() }

func (w *wrappedJS) PublishAsyncComplete() <-chan struct{} { return w.js.PublishAsyncComplete() }

func (w *wrappedJS) CleanupPublisher() { w.js.CleanupPublisher() }
