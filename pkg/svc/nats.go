package svc

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Connect opens a NATS connection that reconnects forever and logs every
// disconnect and reconnect, and returns it with a JetStream context.
func Connect(ctx context.Context, url, name string, log *slog.Logger) (*nats.Conn, jetstream.JetStream, error) {
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
	var nc *nats.Conn
	var err error
	// Retry the first connect until ctx ends: services may start before NATS.
	for {
		nc, err = nats.Connect(url, opts...)
		if err == nil {
			break
		}
		log.Warn("nats connect failed, retrying", "url", url, "err", err)
		t := time.NewTimer(time.Second)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, nil, fmt.Errorf("connect %s: %w", url, err)
		case <-t.C:
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("jetstream on %s: %w", url, err)
	}
	return nc, js, nil
}
