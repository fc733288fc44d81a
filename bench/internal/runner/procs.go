package runner

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Procs runs every part of the benchmark as its own process: pilotwire
// (`pilotwire up`: embedded NATS and the four services), the baseline
// (`pwbench baseline`), the load generator (`pwbench loadgen --control`)
// and, for the records lab, bin/ingest and bin/ads.
type Procs struct {
	// Exe is the pwbench binary; BinDir holds pilotwire's binaries.
	Exe, BinDir string
	// WorkDir holds data directories; LogDir every process's output.
	WorkDir, LogDir string
	// OursEnv is added to the environment of pilotwire's processes
	// (PILOT_DEBOUNCE_AFTER=..., PILOTWIRE_NEW_STREAM_RATE=...).
	OursEnv []string
	// LogLevel of pilotwire's services.
	LogLevel string
	// ProfileDir, if set, receives CPU profiles of the baseline and
	// load generator processes.
	ProfileDir string

	mu  sync.Mutex // guards seq
	seq int
}

func (p *Procs) next(name string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.seq++
	return fmt.Sprintf("%s-%03d", name, p.seq)
}

// proc is a child process.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan error // receives Wait's result once; re-sent for later readers
	log  *os.File
}

// start runs exe with args, its output in LogDir/<name>.log, in its own
// process group (so that a stuck tree can be killed whole).
func (p *Procs) start(name, exe string, env []string, args ...string) (*proc, error) {
	if err := os.MkdirAll(p.LogDir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(p.LogDir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s (%s): %w", name, exe, err)
	}
	pr := &proc{name: name, cmd: cmd, done: make(chan error, 1), log: f}
	go func() { pr.done <- cmd.Wait() }()
	return pr, nil
}

func (pr *proc) pid() int { return pr.cmd.Process.Pid }

// stop sends SIGTERM and waits; after timeout it kills the process group.
func (pr *proc) stop(timeout time.Duration) error {
	defer pr.log.Close()
	_ = pr.cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case err := <-pr.done:
		pr.done <- err
		var exit *exec.ExitError
		if errors.As(err, &exit) && exit.ExitCode() == -1 {
			return nil // ended by our signal
		}
		return err
	case <-t.C:
		_ = syscall.Kill(-pr.pid(), syscall.SIGKILL)
		err := <-pr.done
		pr.done <- err
		return fmt.Errorf("%s did not stop within %s; killed", pr.name, timeout)
	}
}

// waitReady polls url until it answers 200, the process exits, or timeout.
func waitReady(ctx context.Context, pr *proc, url string, timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if resp, err := client.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %s (see %s)", pr.name, timeout, pr.log.Name())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-pr.done:
			pr.done <- err
			return fmt.Errorf("%s exited before it was ready: %v (see %s)", pr.name, err, pr.log.Name())
		case <-tick.C:
		}
	}
}

// FreePorts returns n consecutive free loopback ports below the
// ephemeral range (so that the load generator's connections cannot take
// them).
func FreePorts(n int) (int, error) {
	for range 200 {
		base := 20000 + rand.IntN(12000-n)
		ok := true
		var ls []net.Listener
		for i := range n {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+i))
			if err != nil {
				ok = false
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			l.Close()
		}
		if ok {
			return base, nil
		}
	}
	return 0, errors.New("no free ports")
}

func addr(port int) string { return "127.0.0.1:" + strconv.Itoa(port) }

// metric reads the sum of every series of a metric from a /metrics page.
// liveAfterGC asks the process serving pprofURL (its /debug/pprof/heap)
// for a heap profile after a forced GC, twice, then reads its live heap
// and goroutine stacks from metricsURL. Twice: buffers in a sync.Pool
// (grpc-go's pooled send buffers, about 460 KiB a stream right after a
// sync) survive the first GC in the pool's victim cache.
func liveAfterGC(ctx context.Context, pprofURL, metricsURL string) (uint64, bool) {
	for range 2 {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, pprofURL+"?gc=1", nil)
		if err != nil {
			return 0, false
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return 0, false
		}
	}
	heap, ok1 := metric(ctx, metricsURL, "go_memstats_heap_alloc_bytes")
	stack, ok2 := metric(ctx, metricsURL, "go_memstats_stack_inuse_bytes")
	if !ok1 || !ok2 {
		return 0, false
	}
	return uint64(heap + stack), true
}

func metric(ctx context.Context, url, name string) (float64, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	total, found := 0.0, false
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if !strings.HasPrefix(rest, " ") && !strings.HasPrefix(rest, "{") {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			total += v
			found = true
		}
	}
	return total, found
}
