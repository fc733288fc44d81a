package loadgen

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pilotwire/pilotwire/bench/internal/baseline"
	"github.com/pilotwire/pilotwire/bench/internal/mesh"
	"github.com/pilotwire/pilotwire/bench/internal/xdsstate"
	"github.com/pilotwire/pilotwire/bench/internal/yamldir"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/xdsgen"
)

func TestMain(m *testing.M) {
	if os.Getenv("LOADGEN_TEST_CHILD") == "1" {
		// The remote end of TestRemote: a fleet served on stdin/stdout.
		f, err := New(Options{Addr: os.Getenv("LOADGEN_TEST_ADDR"), Proxies: 3})
		if err != nil {
			os.Exit(2)
		}
		_ = Serve(f, StdioConn{Reader: os.Stdin, Writer: os.Stdout})
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// expected returns the State a proxy should reach for the mesh in dir.
func expected(t *testing.T, dir string) xdsstate.State {
	t.Helper()
	store, err := yamldir.Load(dir, "Kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	c, err := xdsstate.Expected(store.Snapshot(), xdsgen.Envoy)
	if err != nil {
		t.Fatal(err)
	}
	return c.State()
}

// startBaseline serves dir with the go-control-plane baseline until the
// test ends.
func startBaseline(t *testing.T, dir, eds string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- baseline.Run(ctx, baseline.Config{
			Dir: dir, ADSAddr: "127.0.0.1:0", EDS: eds, Debounce: 10 * time.Millisecond,
			Log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
			OnListen: func(a string) { addr <- a },
		})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("baseline: %v", err)
		}
	})
	deadline := time.NewTimer(testutil.DefaultTimeout)
	defer deadline.Stop()
	select {
	case a := <-addr:
		return a
	case err := <-done:
		t.Fatalf("baseline: %v", err)
	case <-deadline.C:
		t.Fatal("baseline did not start")
	}
	return ""
}

func writeMesh(t *testing.T, spec mesh.Spec) (*mesh.Mesh, string) {
	t.Helper()
	m, err := mesh.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := m.WriteAll(dir); err != nil {
		t.Fatal(err)
	}
	return m, dir
}

func waitAll(t *testing.T, f *Fleet, what string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	r, err := f.Wait(ctx, testutil.DefaultTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if r.Matched != r.Total {
		t.Fatalf("%s: %d of %d proxies converged; not: %v %v", what, r.Matched, r.Total, r.Unmatched, r.Sample)
	}
	return r
}

// TestConvergence runs the trace's kinds of change against the baseline,
// with state-of-the-world and delta streams, and checks that every proxy
// is detected at the expected configuration, and no earlier.
func TestConvergence(t *testing.T) {
	for _, tc := range []struct {
		name  string
		delta bool
		eds   string
		fresh bool // reconnect as new proxies
	}{
		{name: "sotw snapshot", eds: baseline.EDSSnapshot},
		{name: "sotw linear", eds: baseline.EDSLinear, fresh: true},
		{name: "delta", delta: true, eds: baseline.EDSSnapshot},
		{name: "delta fresh", delta: true, eds: baseline.EDSLinear, fresh: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, dir := writeMesh(t, mesh.Spec{Services: 6, Endpoints: 2, Seed: 1})
			addr := startBaseline(t, dir, tc.eds)
			f, err := New(Options{Addr: addr, Proxies: 5, Delta: tc.delta})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			ctx := context.Background()
			if err := f.SetTarget(ctx, Target{ID: 1, State: expected(t, dir)}); err != nil {
				t.Fatal(err)
			}
			if err := f.Start(ctx); err != nil {
				t.Fatal(err)
			}
			waitAll(t, f, "initial sync")

			// A target no proxy holds yet is not matched before the change.
			s := m.ChangeEndpoint()
			next := mesh.Render(s)
			tmp := t.TempDir()
			if _, err := mesh.WriteFile(tmp, mesh.FileName(s), next); err != nil {
				t.Fatal(err)
			}
			want := expectedAfter(t, dir, tmp, mesh.FileName(s))
			if err := f.SetTarget(ctx, Target{ID: 2, State: want}); err != nil {
				t.Fatal(err)
			}
			if r := f.result(f.target.Load()); r.Matched != 0 {
				t.Fatalf("%d proxies matched a target before the change was made", r.Matched)
			}
			at, err := mesh.Write(dir, s)
			if err != nil {
				t.Fatal(err)
			}
			r := waitAll(t, f, "endpoint change")
			for _, pt := range r.Times {
				if pt.Ack < at.UnixNano() || pt.Arrival > pt.Ack {
					t.Errorf("proxy %d: arrival %d, ack %d, change written at %d", pt.Proxy, pt.Arrival, pt.Ack, at.UnixNano())
				}
			}

			s = m.AddService()
			if err := f.SetTarget(ctx, Target{ID: 3, State: expectedWith(t, dir, s)}); err != nil {
				t.Fatal(err)
			}
			if _, err := mesh.Write(dir, s); err != nil {
				t.Fatal(err)
			}
			waitAll(t, f, "service added")

			since, err := f.Reconnect(ctx, tc.fresh)
			if err != nil {
				t.Fatal(err)
			}
			if err := f.SetTarget(ctx, Target{ID: 4, State: expected(t, dir), Fresh: true, Since: since}); err != nil {
				t.Fatal(err)
			}
			r = waitAll(t, f, "reconnect")
			st, _ := f.Stats(ctx)
			if st.StreamsOpened < 10 {
				t.Errorf("%d streams opened, want at least 10 (5 proxies, one reconnect)", st.StreamsOpened)
			}
			for _, pt := range r.Times {
				if pt.Ack < since {
					t.Errorf("proxy %d converged at %d, before the reconnect at %d", pt.Proxy, pt.Ack, since)
				}
			}
			fin, _ := f.Final(ctx)
			if len(fin.States) != 1 {
				t.Errorf("proxies disagree: %v", fin.States)
			}
			if st.MessageBytes == 0 || st.Versions == 0 || st.ByType[xdsstate.EDS].Bytes == 0 {
				t.Errorf("counters not counting: %+v", st)
			}
		})
	}
}

// expectedAfter is the expected state of dir with file name replaced by
// the one in tmp, without touching dir.
func expectedAfter(t *testing.T, dir, tmp, name string) xdsstate.State {
	t.Helper()
	cp := t.TempDir()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		src := dir + "/" + e.Name()
		if e.Name() == name {
			src = tmp + "/" + name
		}
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(cp+"/"+e.Name(), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return expected(t, cp)
}

func expectedWith(t *testing.T, dir string, s *mesh.Service) xdsstate.State {
	t.Helper()
	tmp := t.TempDir()
	if _, err := mesh.WriteFile(tmp, mesh.FileName(s), mesh.Render(s)); err != nil {
		t.Fatal(err)
	}
	cp := t.TempDir()
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		b, _ := os.ReadFile(dir + "/" + e.Name())
		_ = os.WriteFile(cp+"/"+e.Name(), b, 0o644)
	}
	b, _ := os.ReadFile(tmp + "/" + mesh.FileName(s))
	_ = os.WriteFile(cp+"/"+mesh.FileName(s), b, 0o644)
	return expected(t, cp)
}

// TestRetriesUntilServerUp: proxies started before the server keep
// retrying and converge once it is up.
func TestRetriesUntilServerUp(t *testing.T) {
	_, dir := writeMesh(t, mesh.Spec{Services: 3, Endpoints: 1, Seed: 2})
	// Reserve a port, start the fleet against it, then serve on it.
	addr := startBaseline(t, dir, baseline.EDSSnapshot)
	f, err := New(Options{Addr: "127.0.0.1:1", Proxies: 2, BackoffBase: 5 * time.Millisecond, BackoffMax: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	_ = f.SetTarget(ctx, Target{ID: 1, State: expected(t, dir)})
	_ = f.Start(ctx)
	time.Sleep(100 * time.Millisecond) // let a few attempts fail
	st, _ := f.Stats(ctx)
	f.Close()
	if st.StreamFailures == 0 {
		t.Fatalf("no failures counted against a closed port")
	}
	f2, _ := New(Options{Addr: addr, Proxies: 2})
	defer f2.Close()
	_ = f2.SetTarget(ctx, Target{ID: 1, State: expected(t, dir)})
	_ = f2.Start(ctx)
	waitAll(t, f2, "after failures")
}

// TestBare: against a server that answers with empty responses, proxies
// converge to the empty state.
func TestBare(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- baseline.Run(ctx, baseline.Config{Dir: t.TempDir(), ADSAddr: "127.0.0.1:0", Bare: true, OnListen: func(a string) { addr <- a }})
	}()
	defer func() { cancel(); <-done }()
	f, _ := New(Options{Addr: <-addr, Proxies: 4})
	defer f.Close()
	_ = f.SetTarget(ctx, Target{ID: 1})
	_ = f.Start(ctx)
	waitAll(t, f, "bare")
}

// TestRemote drives a fleet in a child process over the RPC protocol.
func TestRemote(t *testing.T) {
	_, dir := writeMesh(t, mesh.Spec{Services: 4, Endpoints: 2, Seed: 3})
	addr := startBaseline(t, dir, baseline.EDSSnapshot)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "LOADGEN_TEST_CHILD=1", "LOADGEN_TEST_ADDR="+addr)
	r, err := StartRemote(exe, []string{"-test.run=^$"}, env, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	if err := r.SetTarget(ctx, Target{ID: 7, State: expected(t, dir)}); err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := r.Wait(ctx, testutil.DefaultTimeout)
	if err != nil {
		t.Fatal(err)
	}
	if res.Matched != 3 || res.TargetID != 7 {
		t.Fatalf("remote result %+v, want 3 proxies at target 7", res)
	}
	fin, err := r.Final(ctx)
	if err != nil || len(fin.States) != 1 {
		t.Fatalf("Final = %+v, %v", fin, err)
	}
	if err := r.Quiet(ctx, 20*time.Millisecond, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil && !errors.Is(err, &exec.ExitError{}) {
		t.Fatalf("close: %v", err)
	}
}

func TestDiffSorted(t *testing.T) {
	add, remove := diffSorted([]string{"a", "c", "d"}, []string{"b", "c", "e"})
	if len(add) != 2 || add[0] != "b" || add[1] != "e" || len(remove) != 2 || remove[0] != "a" || remove[1] != "d" {
		t.Errorf("diffSorted = +%v -%v", add, remove)
	}
}
