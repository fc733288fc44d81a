package k8stest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

const (
	// pollInterval is how often readiness is polled while starting.
	pollInterval = 50 * time.Millisecond
	// probeTimeout bounds one readiness request.
	probeTimeout = 2 * time.Second
	// portAttempts is how many times a child is started with fresh ports
	// when the ones picked were taken before the child could bind them.
	portAttempts = 3
)

// loopbackHTTP is the client for plain-HTTP probes of etcd: no proxy from
// the environment, no keep-alive (so no idle connections linger).
var loopbackHTTP = &http.Client{Transport: &http.Transport{
	Proxy:             nil,
	DisableKeepAlives: true,
}}

// waitReady polls check until it succeeds, ctx ends, or one of procs exits.
func waitReady(ctx context.Context, procs []*process, check func(context.Context) error) error {
	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	var lastErr error
	for {
		for _, p := range procs {
			if done, err := p.exited(); done {
				return p.exitError(err)
			}
		}
		probeCtx, cancel := context.WithTimeout(ctx, probeTimeout)
		lastErr = check(probeCtx)
		cancel()
		if lastErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last probe: %v)", ctx.Err(), lastErr)
		case <-ticker.C:
		}
	}
}

func isPortInUse(err error) bool { return errors.Is(err, errPortInUse) }

// freePort2 picks two distinct free loopback ports. Both listeners are held
// until both are picked, then closed; a child binds them right after.
func freePort2() (int, int, error) {
	l1, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, fmt.Errorf("pick port: %w", err)
	}
	defer l1.Close()
	l2, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, fmt.Errorf("pick port: %w", err)
	}
	defer l2.Close()
	return l1.Addr().(*net.TCPAddr).Port, l2.Addr().(*net.TCPAddr).Port, nil
}
