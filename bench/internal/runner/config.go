// Package runner orchestrates the benchmark: for each mesh size and proxy
// count it runs the trace (initial sync, one endpoint changed, one service
// added, a rolling restart, every proxy reconnecting) against each control
// plane in turn, alternating between them round by round, and summarizes
// the measured rounds as medians with their range.
//
// The control planes, the load generator and the change-record lab are
// interfaces: the `pwbench run` command runs them as separate
// processes (systems.go); tests run them in-process.
package runner

import (
	"context"
	"io"
	"log/slog"
	"time"

	"github.com/pilotwire/pilotwire/bench/internal/loadgen"
	"github.com/pilotwire/pilotwire/bench/internal/mesh"
)

// System is a control plane under test.
type System interface {
	// Name is how reports call it.
	Name() string
	// Start serves the manifests in dir until the instance is stopped. It
	// returns once the control plane says it is ready; the runner then
	// waits for a reference proxy to get the expected configuration.
	Start(ctx context.Context, dir string) (Instance, error)
}

// Instance is a running control plane.
type Instance interface {
	// ADSAddr is where proxies connect.
	ADSAddr() string
	// CPU is the CPU time used so far by every process of the control
	// plane; ok is false when it cannot be measured.
	CPU() (cpu time.Duration, ok bool)
	// FrontendRSS is the resident memory of the process holding the ADS
	// streams.
	FrontendRSS() (bytes uint64, ok bool)
	// FrontendLive is the same process's live heap plus goroutine stacks
	// right after two GCs it is asked for from outside
	// (/debug/pprof/heap?gc=1, then go_memstats_heap_alloc_bytes and
	// go_memstats_stack_inuse_bytes from its /metrics).
	FrontendLive(ctx context.Context) (bytes uint64, ok bool)
	// Marshals is the ADS frontend's pilotwire_xds_marshals_total.
	Marshals(ctx context.Context) (n float64, ok bool)
	// MarshalsPerResponse is true when the server marshals every resource
	// of every response again (go-control-plane), on top of Marshals.
	MarshalsPerResponse() bool
	// Stop stops the control plane and waits for it.
	Stop() error
}

// Staged is an Instance that can break its latency into stages: for each
// stage, the sum and count of a latency histogram of the control plane.
type Staged interface {
	Stages(ctx context.Context) map[string][2]float64
}

// Fleet is a load generator (see loadgen.Fleet).
type Fleet interface {
	Start(ctx context.Context) error
	SetTarget(ctx context.Context, t loadgen.Target) error
	Wait(ctx context.Context, timeout time.Duration) (loadgen.Result, error)
	Quiet(ctx context.Context, quiet, max time.Duration) error
	Stats(ctx context.Context) (loadgen.Stats, error)
	Reconnect(ctx context.Context, fresh bool) (int64, error)
	Final(ctx context.Context) (loadgen.Final, error)
	Close() error
}

var (
	_ Fleet = (*loadgen.Fleet)(nil)
	_ Fleet = (*loadgen.Remote)(nil)
)

// Fleets makes load generators.
type Fleets interface {
	// NewFleet starts a generator (without starting its proxies).
	NewFleet(ctx context.Context, o loadgen.Options) (Fleet, error)
	// CPU is the CPU time the generator process used so far.
	CPU(f Fleet) (time.Duration, bool)
}

// LocalFleets runs fleets in this process.
type LocalFleets struct{}

// NewFleet returns an in-process fleet.
func (LocalFleets) NewFleet(_ context.Context, o loadgen.Options) (Fleet, error) {
	return loadgen.New(o)
}

// CPU cannot be told apart from the rest of this process.
func (LocalFleets) CPU(Fleet) (time.Duration, bool) { return 0, false }

// RecordsLab measures the change stream alone: how fast ingest turns a
// directory into change records, and how fast a fresh ADS frontend
// replays them into its model.
type RecordsLab interface {
	// Ingest runs an ingest of src under a fresh subject prefix until it
	// is ready (its initial scan or list published), stops it, and
	// reports.
	Ingest(ctx context.Context, prefix string, src IngestSource) (IngestRun, error)
	// Replay starts an ADS frontend on prefix, times it until ready (its
	// model caught up with the stream), and stops it.
	Replay(ctx context.Context, prefix string) (time.Duration, error)
	// Snapshot writes a snapshot of prefix's change stream as the
	// debouncer's snapshotter does, so that the next Replay starts from it.
	Snapshot(ctx context.Context, prefix string) error
	Close() error
}

// IngestSource is what an ingest reads: a directory of manifests, or the
// cluster of a kubeconfig through its informers.
type IngestSource struct{ Dir, Kubeconfig string }

// IngestRun is one ingest of a source.
type IngestRun struct {
	// Ready is from the process start to ready.
	Ready time.Duration
	// Records is the number of records on the stream.
	Records int
	// First and Last are the stream times of the first and last record.
	First, Last time.Time
}

// Config of a benchmark run.
type Config struct {
	// Systems under test, in the order they alternate; Systems[0] is
	// pilotwire, Systems[1] the baseline (ratios are Systems[1]/Systems[0]).
	Systems []System
	// Bare, if set, is run once per configuration to measure what a bare
	// gRPC ADS server holds per stream.
	Bare   System
	Fleets Fleets

	Proxies []int
	Meshes  []mesh.Spec
	Rounds  int // measured rounds per system and configuration
	Warmup  int // rounds run first and dropped
	Delta   bool
	// DecodeAll makes the generator decode every resource of every response.
	DecodeAll bool
	// ReconnectFresh makes proxies reconnect as new proxies (holding
	// nothing) instead of resuming as Envoy does.
	ReconnectFresh bool

	// The trace.
	RestartEndpoints int
	RestartDuration  time.Duration
	RestartSteps     int
	// StepTimeout bounds the wait for every proxy to converge.
	StepTimeout time.Duration
	// Quiet is how long no response must arrive before a step is over (the
	// step's CPU and bytes are counted until then); QuietMax caps it.
	Quiet, QuietMax time.Duration
	// After the quiet period a step also waits until the control plane is
	// idle: at most IdleCPU cores over the last IdleWindow, for up to
	// IdleMax. What it used meanwhile (work the step left behind it, such
	// as registry writes or history records) is counted in the step, not in
	// the next one.
	IdleCPU    float64
	IdleWindow time.Duration
	IdleMax    time.Duration

	// Records, if set, measures the change stream with RecordsMesh.
	Records       RecordsLab
	RecordsMesh   mesh.Spec
	RecordsRepeat int
	// KubeServices is the size of the mesh the records measurement writes
	// into a real kube-apiserver (k8stest; etcd and kube-apiserver from
	// make k8s-binaries) for ingest's informer source: Services with one
	// EndpointSlice each (internal/testkit/kubemesh). 0 skips it.
	KubeServices int
	// KubePods is the Pods of each such Service (at most the 10 its slice
	// names).
	KubePods int

	// WorkDir holds mesh directories (one per round).
	WorkDir string
	// DebounceAfter is pilotwire's push debounce, and FileDebounce the
	// quiet time its ingest waits on a changed file, for the targets.
	DebounceAfter, FileDebounce time.Duration

	Log *slog.Logger
	// Progress receives one line per step as the run goes.
	Progress io.Writer
}
