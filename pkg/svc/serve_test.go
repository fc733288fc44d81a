package svc_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/svc"
)

func testCommon(url string) svc.Common {
	return svc.Common{NATSURL: url, Prefix: "pw", HTTPAddr: "127.0.0.1:0", LogLevel: "error", LogFormat: "text"}
}

// get fetches path from the service's HTTP server, without keeping the
// connection open (goleak checks after the tests).
func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	client := &http.Client{Timeout: testutil.DefaultTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(body)
}

// TestServeShutsDownOnCancel runs a service until its context is cancelled:
// run gets connected dependencies and a serving HTTP server, and once ctx
// ends, run's context ends, Serve returns nil, and nothing keeps running
// (the HTTP port is closed; goleak checks the goroutines).
func TestServeShutsDownOnCancel(t *testing.T) {
	url := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	started := make(chan svc.Deps, 1)
	runEnded := make(chan struct{})
	served := make(chan error, 1)
	go func() {
		served <- svc.Serve(ctx, testCommon(url), "test", func(ctx context.Context, d svc.Deps) error {
			defer close(runEnded)
			started <- d
			<-ctx.Done()
			return ctx.Err() // a service that reports its cancellation is not failing
		})
	}()
	var d svc.Deps
	select {
	case d = <-started:
	case err := <-served:
		t.Fatalf("Serve returned before run started: %v", err)
	}
	if d.NC == nil || !d.NC.IsConnected() || d.JS == nil || d.Log == nil || d.Reg == nil || d.Health == nil || d.HTTP == nil {
		t.Fatalf("incomplete deps: %+v", d)
	}
	addr := d.HTTP.Addr()
	if code, _ := get(t, addr, "/healthz"); code != http.StatusOK {
		t.Errorf("/healthz = %d, want 200", code)
	}
	if code, body := get(t, addr, "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "starting") {
		t.Errorf("/readyz before ready = %d %q, want 503 starting", code, body)
	}
	d.Health.SetReady()
	if code, _ := get(t, addr, "/readyz"); code != http.StatusOK {
		t.Errorf("/readyz when ready = %d, want 200", code)
	}
	if code, body := get(t, addr, "/metrics"); code != http.StatusOK || !strings.Contains(body, "pilotwire_nats_connect_errors_total 0") {
		t.Errorf("/metrics = %d, want 200 with the connect error counter at 0:\n%s", code, body)
	}

	cancel()
	if err := <-served; err != nil {
		t.Errorf("Serve after cancel = %v, want nil", err)
	}
	select {
	case <-runEnded:
	default:
		t.Error("Serve returned before run did")
	}
	if !d.NC.IsClosed() {
		t.Error("NATS connection still open after Serve returned")
	}
	if c, err := net.Dial("tcp", addr); err == nil {
		c.Close()
		t.Errorf("HTTP server still accepts connections on %s", addr)
	}
}

func TestServeReturnsRunError(t *testing.T) {
	url := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	boom := errors.New("boom")
	err := svc.Serve(ctx, testCommon(url), "test", func(context.Context, svc.Deps) error { return boom })
	if !errors.Is(err, boom) || !strings.HasPrefix(err.Error(), "test: ") {
		t.Errorf("Serve = %v, want test: boom", err)
	}
}

// TestServeGivesUpConnectingWhenCancelled: NATS is not there, so Serve
// retries the connect until its context ends, and never runs the service.
func TestServeGivesUpConnectingWhenCancelled(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "nats://" + lis.Addr().String()
	lis.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.ShortTimeout)
	defer cancel()
	err = svc.Serve(ctx, testCommon(deadURL), "test", func(context.Context, svc.Deps) error {
		t.Error("run called without NATS")
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "connect "+deadURL) {
		t.Errorf("Serve = %v, want a connect error", err)
	}
}

// TestServeLocalRunsWithoutNATS: ServeLocal never dials NATS (the URL
// names a closed port), runs the service with its HTTP server and nil
// NATS deps, and adds no NATS metric.
func TestServeLocalRunsWithoutNATS(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "nats://" + lis.Addr().String()
	lis.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	started := make(chan svc.Deps, 1)
	served := make(chan error, 1)
	go func() {
		served <- svc.ServeLocal(ctx, testCommon(deadURL), "test", func(ctx context.Context, d svc.Deps) error {
			started <- d
			<-ctx.Done()
			return nil
		})
	}()
	var d svc.Deps
	select {
	case d = <-started:
	case err := <-served:
		t.Fatalf("ServeLocal returned before run started: %v", err)
	}
	if d.NC != nil || d.JS != nil || d.HTTP == nil || d.Reg == nil || d.Health == nil || d.Log == nil {
		t.Fatalf("deps = %+v, want HTTP, registry, health and log without NATS", d)
	}
	if code, body := get(t, d.HTTP.Addr(), "/metrics"); code != http.StatusOK || strings.Contains(body, "pilotwire_nats_") {
		t.Errorf("/metrics = %d, want 200 without NATS metrics:\n%s", code, body)
	}
	cancel()
	if err := <-served; err != nil {
		t.Errorf("ServeLocal after cancel = %v, want nil", err)
	}
}

func TestServeRejectsBadLogConfig(t *testing.T) {
	for _, c := range []svc.Common{
		{LogLevel: "loud", LogFormat: "text", HTTPAddr: "127.0.0.1:0"},
		{LogLevel: "info", LogFormat: "xml", HTTPAddr: "127.0.0.1:0"},
	} {
		err := svc.Serve(testCtx(t), c, "test", func(context.Context, svc.Deps) error {
			t.Error("run called with a bad log config")
			return nil
		})
		if err == nil {
			t.Errorf("Serve with log level %q format %q succeeded", c.LogLevel, c.LogFormat)
		}
	}
}

// TestDebugNotOnMetricsPort: pprof (and every /debug handler) is served on
// its own listener, not on the health and metrics address.
func TestDebugNotOnMetricsPort(t *testing.T) {
	url := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	c := testCommon(url)
	c.Profiling = true
	c.DebugAddr = svc.DefaultDebugAddr(c.HTTPAddr)
	err := svc.Serve(ctx, c, "test", func(ctx context.Context, d svc.Deps) error {
		d.Debug.Handle("/debug/syncz", http.NotFoundHandler())
		if code, _ := get(t, d.HTTP.Addr(), "/debug/pprof/"); code != http.StatusNotFound {
			t.Errorf("/debug/pprof/ on the metrics address = %d, want 404", code)
		}
		if code, _ := get(t, d.Debug.Addr(), "/debug/pprof/"); code != http.StatusOK {
			t.Errorf("/debug/pprof/ on the debug address = %d, want 200", code)
		}
		for _, path := range []string{"/metrics", "/healthz"} {
			if code, _ := get(t, d.Debug.Addr(), path); code != http.StatusNotFound {
				t.Errorf("%s on the debug address = %d, want 404 (on the HTTP address only)", path, code)
			}
		}
		if host, _, _ := net.SplitHostPort(d.Debug.Addr()); host != "127.0.0.1" {
			t.Errorf("debug listener on %s, want loopback", d.Debug.Addr())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestDebugAddrDefaultsToLoopback: whatever the HTTP address (all
// interfaces, say, for Prometheus), the debug listener's default is
// 127.0.0.1, for every service's default.
func TestDebugAddrDefaultsToLoopback(t *testing.T) {
	for http, want := range map[string]string{
		":9092":          "127.0.0.1:9192",
		"0.0.0.0:9093":   "127.0.0.1:9193",
		"127.0.0.1:9091": "127.0.0.1:9191",
		"127.0.0.1:0":    "127.0.0.1:0",
	} {
		if got := svc.DefaultCommon(http).DebugAddr; got != want {
			t.Errorf("DefaultCommon(%q).DebugAddr = %q, want %q", http, got, want)
		}
	}
}
