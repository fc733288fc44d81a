// Package faults is the fault matrix: pilotwire's services as separate
// processes on a real three-node JetStream cluster (nats-server processes,
// every stream and bucket at three replicas), 500 simulated proxies, a
// churn of changes written to a YAML directory, and one fault after
// another during the churn (kill -9, SIGSTOP past the lease TTL, a NATS
// node lost, a frontend cut from NATS). After each fault it checks that
// every proxy holds the exact configuration a fresh render of the final
// directory gives, that the change stream holds each change written once,
// that no PushRequest was lost, duplicated or reordered, and that no
// frontend applied an order out of order; it reports the time to converge.
// `pwbench faults` runs it; docs/reliability.md explains what it promises.
package faults

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pilotwire/pilotwire/bench/internal/runner"
)

// proc is one child process that can be killed, paused and started again
// with the same arguments. Its output is appended to one log file across
// restarts.
type proc struct {
	// set at construction
	name    string
	exe     string
	args    []string
	logPath string
	http    string   // host:port of /readyz and /metrics; "" for none
	env     []string // added to the harness's environment

	// guarded by mu
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd exits
}

func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !isClosed(p.done) {
		return fmt.Errorf("%s already running", p.name)
	}
	f, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "---- faults: start %s at %s\n", p.name, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.exe, p.args...)
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start %s (%s): %w", p.name, p.exe, err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(done)
	}()
	p.cmd, p.done = cmd, done
	return nil
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func (p *proc) running() (*exec.Cmd, chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd, p.done
}

// alive reports whether the process is running (or stopped).
func (p *proc) alive() bool {
	cmd, done := p.running()
	return cmd != nil && !isClosed(done)
}

// signal sends sig to the process.
func (p *proc) signal(sig syscall.Signal) error {
	cmd, done := p.running()
	if cmd == nil || isClosed(done) {
		return fmt.Errorf("%s is not running", p.name)
	}
	return cmd.Process.Signal(sig)
}

// kill sends SIGKILL and waits for the process to be gone.
func (p *proc) kill() error {
	cmd, done := p.running()
	if cmd == nil || isClosed(done) {
		return fmt.Errorf("%s is not running", p.name)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	<-done
	return nil
}

// stop sends SIGCONT and SIGTERM, and SIGKILL after timeout.
func (p *proc) stop(timeout time.Duration) {
	cmd, done := p.running()
	if cmd == nil || isClosed(done) {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGCONT)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-done
	}
}

// waitReady polls /readyz until it answers 200, the process exits, or
// timeout.
func (p *proc) waitReady(ctx context.Context, timeout time.Duration) error {
	return poll(ctx, timeout, 20*time.Millisecond, func() (bool, error) {
		if !p.alive() {
			return false, fmt.Errorf("%s exited (see %s)", p.name, p.logPath)
		}
		return httpOK("http://" + p.http + "/readyz"), nil
	})
}

var httpClient = &http.Client{Timeout: 2 * time.Second}

func httpOK(url string) bool {
	resp, err := httpClient.Get(url)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// poll calls cond every interval until it is true, fails, or timeout.
func poll(ctx context.Context, timeout, interval time.Duration, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// metrics reads a /metrics page into sums per metric name, and per
// name{labels} as written.
func metrics(ctx context.Context, hostport string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+hostport+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := make(map[string]float64)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		series := line[:i]
		out[series] += v
		if j := strings.IndexByte(series, '{'); j >= 0 {
			out[series[:j]] += v
		}
	}
	return out, sc.Err()
}

// ports hands out free loopback ports below the ephemeral range, so that
// the proxies' outgoing connections cannot take them between runs.
type ports struct {
	next int
}

func newPorts(n int) (*ports, error) {
	base, err := runner.FreePorts(n)
	if err != nil {
		return nil, err
	}
	return &ports{next: base}, nil
}

func (p *ports) take() string {
	p.next++
	return "127.0.0.1:" + strconv.Itoa(p.next-1)
}
