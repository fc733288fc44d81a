package svc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// NewRegistry returns a registry with the Go and process collectors, owned by
// one service.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Health tracks a service's readiness. Zero value is not ready.
type Health struct {
	ready  atomic.Bool
	reason atomic.Value // string
}

// SetReady marks the service ready.
func (h *Health) SetReady() { h.ready.Store(true) }

// SetNotReady marks the service not ready and says why.
func (h *Health) SetNotReady(reason string) {
	h.reason.Store(reason)
	h.ready.Store(false)
}

// Ready reports readiness.
func (h *Health) Ready() bool { return h.ready.Load() }

// HTTPServer serves handlers on one listener: the health and metrics
// server (NewHTTPServer) or the debug server (NewDebugServer).
type HTTPServer struct {
	// set at construction
	mux    *http.ServeMux
	addr   string
	log    *slog.Logger
	health *Health
	// bound address, set by Listen
	lis net.Listener
}

// NewDebugServer builds a server with no handlers, for /debug/* and pprof
// on their own address; it listens only in Listen.
func NewDebugServer(addr string, log *slog.Logger) *HTTPServer {
	return &HTTPServer{mux: http.NewServeMux(), addr: addr, log: log}
}

// NewHTTPServer builds the server of /healthz, /readyz and /metrics; it
// listens only in Listen.
func NewHTTPServer(addr string, reg *prometheus.Registry, health *Health, log *slog.Logger) *HTTPServer {
	s := &HTTPServer{mux: http.NewServeMux(), addr: addr, log: log, health: health}
	s.mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write([]byte("ok\n"))
	})
	s.mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if health.Ready() {
			_, _ = w.Write([]byte("ready\n"))
			return
		}
		reason, _ := health.reason.Load().(string)
		if reason == "" {
			reason = "starting"
		}
		http.Error(w, "not ready: "+reason, http.StatusServiceUnavailable)
	})
	s.mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	return s
}

// EnableProfiling serves Go's pprof profiles under /debug/pprof/.
func (s *HTTPServer) EnableProfiling() {
	s.mux.HandleFunc("/debug/pprof/", pprof.Index)
	s.mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	s.mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	s.mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	s.mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

// Handle adds a handler (debug endpoints).
func (s *HTTPServer) Handle(pattern string, h http.Handler) { s.mux.Handle(pattern, h) }

// Listen binds the address.
func (s *HTTPServer) Listen() error {
	lis, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("listen http %s: %w", s.addr, err)
	}
	s.lis = lis
	return nil
}

// Close releases the bound address of a server that will not Serve.
func (s *HTTPServer) Close() {
	if s.lis != nil {
		_ = s.lis.Close()
	}
}

// Addr is the bound address (after Listen).
func (s *HTTPServer) Addr() string { return s.lis.Addr().String() }

// Serve serves until ctx ends, then shuts down within 5 s.
func (s *HTTPServer) Serve(ctx context.Context) error {
	if s.lis == nil {
		if err := s.Listen(); err != nil {
			return err
		}
	}
	srv := &http.Server{Handler: s.mux, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(s.lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve http %s: %w", s.addr, err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		s.log.Warn("http shutdown", "err", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve http %s: %w", s.addr, err)
	}
	return nil
}
