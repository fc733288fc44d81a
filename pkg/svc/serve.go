package svc

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
)

// Deps are what a service's Run gets from its shell.
type Deps struct {
	NC     *nats.Conn
	JS     jetstream.JetStream
	Log    *slog.Logger
	Reg    *prometheus.Registry
	Health *Health
	// HTTP serves /healthz, /readyz and /metrics (--http-addr).
	HTTP *HTTPServer
	// Debug takes the debug endpoints (/debug/*) and serves pprof when
	// profiling is on (--debug-addr, loopback by default). Nil when the
	// debug listener is off (--debug-addr "").
	Debug *HTTPServer
}

// Serve is the shell of a service binary: logger, metrics registry, HTTP
// server, NATS connection; then run, until ctx ends or run returns.
func Serve(ctx context.Context, c Common, component string, run func(ctx context.Context, d Deps) error) error {
	return serve(ctx, c, component, true, run)
}

// ServeLocal is Serve for a service that uses no NATS (the CA, which must
// keep its keys out of every stream): logger, metrics registry, HTTP
// servers; Deps.NC and Deps.JS are nil.
func ServeLocal(ctx context.Context, c Common, component string, run func(ctx context.Context, d Deps) error) error {
	return serve(ctx, c, component, false, run)
}

func serve(ctx context.Context, c Common, component string, withNATS bool, run func(ctx context.Context, d Deps) error) error {
	log, err := NewLogger(os.Stderr, c.LogLevel, c.LogFormat, component)
	if err != nil {
		return err
	}
	d := Deps{Log: log, Reg: NewRegistry(), Health: &Health{}}
	d.HTTP = NewHTTPServer(c.HTTPAddr, d.Reg, d.Health, log)
	if err := d.HTTP.Listen(); err != nil {
		return err
	}
	servers := []*HTTPServer{d.HTTP}
	debugAddr := "off"
	if c.DebugAddr != "" {
		d.Debug = NewDebugServer(c.DebugAddr, log)
		if c.Profiling {
			d.Debug.EnableProfiling()
		}
		if err := d.Debug.Listen(); err != nil {
			d.HTTP.Close()
			return err
		}
		servers = append(servers, d.Debug)
		debugAddr = d.Debug.Addr()
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	httpErr := make(chan error, len(servers))
	for _, hs := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			httpErr <- hs.Serve(ctx)
		}()
	}
	defer wg.Wait()
	if withNATS {
		log.Info("starting", "http", d.HTTP.Addr(), "debug", debugAddr, "nats", RedactURL(c.NATSURL), "prefix", c.Prefix)
		connectErrors := prometheus.NewCounter(prometheus.CounterOpts{
			Name: "pilotwire_nats_connect_errors_total", Help: "Failed tries of the first NATS connect (retried every second).",
		})
		d.Reg.MustRegister(connectErrors)
		nc, js, err := Connect(ctx, c.NATSURL, "pilotwire-"+component, c.Auth, log, connectErrors)
		if err != nil {
			cancel()
			return err
		}
		defer nc.Close()
		d.NC, d.JS = nc, js
	} else {
		log.Info("starting", "http", d.HTTP.Addr(), "debug", debugAddr)
	}
	runErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		runErr <- run(ctx, d)
	}()
	select {
	case err = <-runErr:
		cancel()
	case err = <-httpErr:
		cancel()
		<-runErr
	}
	if err != nil && parent.Err() == nil {
		log.Error("failed", "err", err)
		return fmt.Errorf("%s: %w", component, err)
	}
	log.Info("stopped")
	return nil
}
