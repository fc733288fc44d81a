package svc

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Connect opens a NATS connection to url (a comma-separated server list)
// with auth's credentials and TLS, that reconnects forever and logs every
// disconnect and reconnect, and returns it with a JetStream context. The
// first connect is retried every second until ctx ends; failures counts
// each failed try. Logs and errors name the URL with its credentials
// redacted.
func Connect(ctx context.Context, url, name string, auth NATSAuth, log *slog.Logger, failures prometheus.Counter) (*nats.Conn, jetstream.JetStream, error) {
	authOpts, err := auth.Options()
	if err != nil {
		return nil, nil, err
	}
	shown := RedactURL(url)
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.RetryOnFailedConnect(false),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil { // nil: our own Close
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) {
			log.Info("nats reconnected", "url", c.ConnectedUrlRedacted())
		}),
		nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subj := ""
			if sub != nil {
				subj = sub.Subject
			}
			log.Error("nats async error", "subject", subj, "err", err)
		}),
	}
	opts = append(opts, authOpts...)
	// Retry the first connect until ctx ends: services may start before NATS.
	var nc *nats.Conn
	var lastErr error
	err = Retry(ctx, RetryOptions{
		First: time.Second, Max: time.Second,
		Log: log, Msg: "nats connect failed, retrying", Attrs: []any{"url", shown}, Failures: failures,
	}, func() error {
		nc, lastErr = nats.Connect(url, opts...)
		return lastErr
	})
	if err != nil { // ctx ended: report why the last try failed
		return nil, nil, fmt.Errorf("connect %s: %w", shown, lastErr)
	}
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(PublishAsyncMaxPending))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream on %s: %w", shown, err)
	}
	return nc, js, nil
}

// PublishAsyncMaxPending bounds the asynchronous publishes awaiting their
// acks on a service's JetStream context (nats.go's default, named here so
// that callers that must stay below it can): past it nats.go blocks a
// publish for up to 200 ms before it fails.
const PublishAsyncMaxPending = 4000

var reconnectMu sync.Mutex

// OnReconnect runs f, on nats.go's callback goroutine, each time nc is
// re-established, after the handler nc already had (Connect's log line).
// f must not block. remove stops it and lets go of f (nats.go cannot take
// a handler back, so a small link of the chain stays): a part that runs
// on a connection the process keeps calls remove when it ends, or f keeps
// everything it refers to alive.
func OnReconnect(nc *nats.Conn, f func()) (remove func()) {
	reconnectMu.Lock()
	defer reconnectMu.Unlock()
	var cur atomic.Pointer[func()]
	cur.Store(&f)
	prev := nc.ReconnectHandler()
	nc.SetReconnectHandler(func(c *nats.Conn) {
		if prev != nil {
			prev(c)
		}
		if g := cur.Load(); g != nil {
			(*g)()
		}
	})
	return func() { cur.Store(nil) }
}
