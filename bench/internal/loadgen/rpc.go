package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/rpc"
	"os/exec"
	"sync"
	"time"
)

// The control protocol: net/rpc (gob) over the loadgen process's stdin and
// stdout. The harness starts `pwbench loadgen --control ...` and drives
// the fleet with these calls; the process exits when its stdin closes.

// Service exposes a Fleet to net/rpc. Its methods mirror Fleet's.
type Service struct{ f *Fleet }

// Empty is an RPC argument or reply with nothing in it.
type Empty struct{}

// WaitArgs are the arguments of Wait.
type WaitArgs struct{ Timeout time.Duration }

// QuietArgs are the arguments of Quiet.
type QuietArgs struct{ Quiet, Max time.Duration }

// Start starts the fleet.
func (s *Service) Start(_ Empty, _ *Empty) error { return s.f.Start(context.Background()) }

// SetTarget sets the target.
func (s *Service) SetTarget(t Target, _ *Empty) error { return s.f.SetTarget(context.Background(), t) }

// Wait waits for the target.
func (s *Service) Wait(a WaitArgs, r *Result) error {
	res, err := s.f.Wait(context.Background(), a.Timeout)
	*r = res
	return err
}

// Quiet waits for a quiet period.
func (s *Service) Quiet(a QuietArgs, _ *Empty) error {
	return s.f.Quiet(context.Background(), a.Quiet, a.Max)
}

// Stats returns the counters.
func (s *Service) Stats(_ Empty, r *Stats) error {
	st, err := s.f.Stats(context.Background())
	*r = st
	return err
}

// ReconnectArgs are the arguments of Reconnect.
type ReconnectArgs struct{ Fresh bool }

// Reconnect reconnects every proxy.
func (s *Service) Reconnect(a ReconnectArgs, r *int64) error {
	at, err := s.f.Reconnect(context.Background(), a.Fresh)
	*r = at
	return err
}

// Final returns the final states.
func (s *Service) Final(_ Empty, r *Final) error {
	fin, err := s.f.Final(context.Background())
	*r = fin
	return err
}

// Serve serves f on rw until rw's reader ends, then closes f.
func Serve(f *Fleet, rw io.ReadWriteCloser) error {
	srv := rpc.NewServer()
	if err := srv.RegisterName("Fleet", &Service{f: f}); err != nil {
		return err
	}
	srv.ServeConn(rw)
	return f.Close()
}

// StdioConn joins stdin and stdout into the connection Serve reads.
type StdioConn struct {
	io.Reader
	io.Writer
}

// Close does nothing: the process exits after Serve.
func (StdioConn) Close() error { return nil }

// Remote is a fleet in another process, started with StartRemote.
type Remote struct {
	cmd    *exec.Cmd
	client *rpc.Client
	stdin  io.Closer
	once   sync.Once
	done   chan error
}

// StartRemote starts `exe args...` (a `pwbench loadgen --control`
// command line) with its stderr going to stderr, and connects to it.
func StartRemote(exe string, args []string, env []string, stderr io.Writer) (*Remote, error) {
	cmd := exec.Command(exe, args...)
	cmd.Env = env
	cmd.Stderr = stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start loadgen: %w", err)
	}
	r := &Remote{cmd: cmd, stdin: in, done: make(chan error, 1)}
	r.client = rpc.NewClient(pipeConn{Reader: out, WriteCloser: in})
	go func() { r.done <- cmd.Wait() }()
	return r, nil
}

type pipeConn struct {
	io.Reader
	io.WriteCloser
}

// Pid is the loadgen process id.
func (r *Remote) Pid() int { return r.cmd.Process.Pid }

func (r *Remote) call(ctx context.Context, method string, args, reply any) error {
	c := r.client.Go("Fleet."+method, args, reply, make(chan *rpc.Call, 1))
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-c.Done:
		if c.Error != nil {
			return fmt.Errorf("loadgen %s: %w", method, c.Error)
		}
		return nil
	case err := <-r.done:
		r.done <- err
		return fmt.Errorf("loadgen exited during %s: %v", method, err)
	}
}

// Start starts the remote fleet.
func (r *Remote) Start(ctx context.Context) error { return r.call(ctx, "Start", Empty{}, &Empty{}) }

// SetTarget sets the remote target.
func (r *Remote) SetTarget(ctx context.Context, t Target) error {
	return r.call(ctx, "SetTarget", t, &Empty{})
}

// Wait waits for the remote target.
func (r *Remote) Wait(ctx context.Context, timeout time.Duration) (Result, error) {
	var res Result
	err := r.call(ctx, "Wait", WaitArgs{Timeout: timeout}, &res)
	return res, err
}

// Quiet waits for a quiet period.
func (r *Remote) Quiet(ctx context.Context, quiet, max time.Duration) error {
	return r.call(ctx, "Quiet", QuietArgs{Quiet: quiet, Max: max}, &Empty{})
}

// Stats returns the remote counters.
func (r *Remote) Stats(ctx context.Context) (Stats, error) {
	var s Stats
	err := r.call(ctx, "Stats", Empty{}, &s)
	return s, err
}

// Reconnect reconnects every remote proxy.
func (r *Remote) Reconnect(ctx context.Context, fresh bool) (int64, error) {
	var at int64
	err := r.call(ctx, "Reconnect", ReconnectArgs{Fresh: fresh}, &at)
	return at, err
}

// Final returns the remote final states.
func (r *Remote) Final(ctx context.Context) (Final, error) {
	var f Final
	err := r.call(ctx, "Final", Empty{}, &f)
	return f, err
}

// Close closes the connection (the process then closes its fleet and
// exits) and waits up to 30 s for the process, then kills it.
func (r *Remote) Close() error {
	var err error
	r.once.Do(func() {
		_ = r.stdin.Close()
		_ = r.client.Close()
		t := time.NewTimer(30 * time.Second)
		defer t.Stop()
		select {
		case err = <-r.done:
		case <-t.C:
			_ = r.cmd.Process.Kill()
			err = errors.Join(errors.New("loadgen did not exit; killed"), <-r.done)
		}
		r.done <- err
	})
	return err
}
