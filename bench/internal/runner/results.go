package runner

import (
	"math"
	"time"

	"github.com/pilotwire/pilotwire/bench/internal/stats"
)

// Step names, in trace order.
const (
	StepInitial   = "initial"
	StepEndpoint  = "endpoint"
	StepService   = "service"
	StepRestart   = "restart"
	StepReconnect = "reconnect"
)

// StepResult is one step of one round.
type StepResult struct {
	Name      string `json:"name"`
	Proxies   int    `json:"proxies"`
	Converged int    `json:"converged"`
	// Conv is per-proxy convergence: seconds from the injection (the last
	// file write; the fleet start for the initial sync; the disconnect for
	// a reconnect) to the ACK of the response that completed the expected
	// configuration. Arrival is the same to that response's arrival.
	Conv    stats.Sample `json:"convergence_s"`
	Arrival stats.Sample `json:"arrival_s"`
	// Times are the per-proxy convergence seconds (for the chart).
	Times []float64 `json:"times_s,omitempty"`
	// FirstWrite is, for the rolling restart, seconds from the first write
	// to the last proxy's ACK.
	FromFirstWrite float64 `json:"from_first_write_s,omitempty"`
	// CPU is the CPU time of every process of the control plane from just
	// before the injection until the fleet was quiet and the control plane
	// idle; LoadgenCPU that of the load generator over the same time. Tail
	// is how long the control plane stayed busy after the fleet was quiet.
	CPU  float64 `json:"cpu_s"`
	Tail float64 `json:"tail_s"`
	// Window is how long CPU was counted over, in seconds.
	Window float64 `json:"window_s,omitempty"`
	// TailRecounted: the tail ran before the control plane's background
	// was measured (the initial sync), and CPU, Tail and Window were
	// recounted to where it came within IdleCPU of that background.
	TailRecounted bool         `json:"tail_recounted,omitempty"`
	tail          *tailSamples // what waiting for idle read, for the recount
	LoadgenCPU    float64      `json:"loadgen_cpu_s"`
	// Bytes received per proxy: whole DiscoveryResponses, and only the
	// resources in them.
	BytesPerProxy         float64 `json:"bytes_per_proxy"`
	ResourceBytesPerProxy float64 `json:"resource_bytes_per_proxy"`
	ResponsesPerProxy     float64 `json:"responses_per_proxy"`
	// ChangedResources and ChangedBytes are what changed in a proxy's
	// expected configuration: the least a server must send.
	ChangedResources int `json:"changed_resources"`
	ChangedBytes     int `json:"changed_bytes"`
	// NewVersions is the number of distinct resource contents the fleet
	// saw for the first time during the step.
	NewVersions int64 `json:"new_versions"`
	// Marshals counted by the control plane during the step, and per new
	// resource version. For a server that marshals per response, the
	// resources it sent are added (derived, not counted by it).
	Marshals           float64 `json:"marshals"`
	MarshalsPerVersion float64 `json:"marshals_per_version"`
	StreamFailures     int64   `json:"stream_failures"`
	Duration           float64 `json:"duration_s"`
	// Stages are the control plane's own latency histograms over the step
	// (pilotwire only): stage -> mean seconds.
	Stages map[string]float64 `json:"stages_mean_s,omitempty"`

	injectAt float64 // unix seconds of the injection
}

// RoundResult is one run of the trace against one system.
type RoundResult struct {
	System  string       `json:"system"`
	Round   int          `json:"round"`
	Warmup  bool         `json:"warmup"`
	Proxies int          `json:"proxies"`
	Mesh    string       `json:"mesh"`
	Steps   []StepResult `json:"steps"`
	// Resident memory of the ADS frontend: before the fleet connected,
	// once it was in sync, and at the end of the trace.
	RSSIdle   uint64 `json:"rss_idle"`
	RSSSynced uint64 `json:"rss_synced"`
	RSSEnd    uint64 `json:"rss_end"`
	// RSSPerStream is (RSSSynced - RSSIdle) / Proxies.
	RSSPerStream float64 `json:"rss_per_stream"`
	// Live heap plus goroutine stacks of the same process right after a
	// GC asked for from outside, before the fleet and once in sync, and
	// their difference per stream.
	LiveIdle      uint64  `json:"live_idle,omitempty"`
	LiveSynced    uint64  `json:"live_synced,omitempty"`
	LivePerStream float64 `json:"live_per_stream,omitempty"`
	// IdleCores is the control plane's CPU, in cores, over a few seconds
	// with the fleet in sync and nothing changing, measured after the
	// initial sync; the later steps' tails end within IdleCPU of it.
	IdleCores float64 `json:"idle_cores,omitempty"`
	// FinalStates is the number of distinct configurations the proxies
	// held at the end (1 when they agree); FinalOK whether it is the
	// expected one and a fresh reference proxy got it too.
	FinalStates int     `json:"final_states"`
	FinalOK     bool    `json:"final_ok"`
	Err         string  `json:"error,omitempty"`
	Duration    float64 `json:"duration_s"`
}

// Step returns the named step, or nil.
func (r *RoundResult) Step(name string) *StepResult {
	for i := range r.Steps {
		if r.Steps[i].Name == name {
			return &r.Steps[i]
		}
	}
	return nil
}

// BareResult is the per-stream memory of a bare gRPC ADS server.
type BareResult struct {
	RSSIdle      uint64  `json:"rss_idle"`
	RSSSynced    uint64  `json:"rss_synced"`
	RSSPerStream float64 `json:"rss_per_stream"`
	// As RoundResult's.
	LiveIdle      uint64  `json:"live_idle,omitempty"`
	LiveSynced    uint64  `json:"live_synced,omitempty"`
	LivePerStream float64 `json:"live_per_stream,omitempty"`
	Err           string  `json:"error,omitempty"`
}

// ConfigResult is every round of one (proxies, mesh) configuration.
type ConfigResult struct {
	Proxies int           `json:"proxies"`
	Mesh    string        `json:"mesh"`
	Rounds  []RoundResult `json:"rounds"`
	Bare    *BareResult   `json:"bare,omitempty"`
}

// RecordsResult measures the change stream.
type RecordsResult struct {
	Mesh    string `json:"mesh"`
	Records int    `json:"records"`
	// Records per second: ingest publishing (stream time of the first to
	// the last record), ingest end to end (process start to ready,
	// including reading and parsing the YAML), replay by a fresh ADS
	// frontend (process start to ready), and replay net of the frontend's
	// start-up on an empty stream.
	IngestPublish  stats.Summary `json:"ingest_publish_per_s"`
	IngestEndToEnd stats.Summary `json:"ingest_end_to_end_per_s"`
	Replay         stats.Summary `json:"replay_per_s"`
	ReplayNet      stats.Summary `json:"replay_net_per_s"`
	// Replay by a fresh ADS frontend from a snapshot of the same stream
	// (as the debouncer's snapshotter writes it), process start to ready.
	ReplaySnapshot stats.Summary `json:"replay_snapshot_per_s"`
	EmptyStart     stats.Summary `json:"empty_start_s"`
	Err            string        `json:"error,omitempty"`
	// Kube is ingest from a Kubernetes informer source (nil: not asked).
	Kube *KubeIngestResult `json:"kube,omitempty"`
}

// KubeIngestResult measures ingest from a real kube-apiserver's informers:
// Services of internal/testkit/kubemesh's mesh with one EndpointSlice
// each, plus the cluster's own objects.
type KubeIngestResult struct {
	Services       int `json:"services"`
	PodsPerService int `json:"pods_per_service,omitempty"`
	// Objects is what the source lists and records; each run's stream must
	// hold exactly that many records once ingest is ready.
	Objects int `json:"objects"`
	// Records per second, as for the YAML directory: publishing (stream
	// time of the first to the last record) and end to end (process start
	// to ready: connect, list, encode, publish).
	Publish  stats.Summary `json:"publish_per_s"`
	EndToEnd stats.Summary `json:"end_to_end_per_s"`
	// Setup is the time the mesh took to create in the apiserver.
	Setup float64 `json:"setup_s"`
	Err   string  `json:"error,omitempty"`
}

// Report is everything a run measured.
type Report struct {
	Started     time.Time      `json:"started"`
	CommandLine string         `json:"command_line"`
	Host        Host           `json:"host"`
	Settings    Settings       `json:"settings"`
	Configs     []ConfigResult `json:"configs"`
	Records     *RecordsResult `json:"records,omitempty"`
	Duration    float64        `json:"duration_s"`
}

// Host describes the machine.
type Host struct {
	CPUs      int    `json:"cpus"`
	CPUModel  string `json:"cpu_model"`
	MemoryGiB int    `json:"memory_gib"`
	GoVersion string `json:"go_version"`
	Kernel    string `json:"kernel"`
}

// Settings are the run's parameters, for the record.
type Settings struct {
	Systems          []string `json:"systems"`
	Rounds           int      `json:"rounds"`
	Warmup           int      `json:"warmup"`
	Delta            bool     `json:"delta"`
	ReconnectFresh   bool     `json:"reconnect_fresh"`
	Seed             uint64   `json:"seed"`
	RestartEndpoints int      `json:"restart_endpoints"`
	RestartDuration  string   `json:"restart_duration"`
	RestartSteps     int      `json:"restart_steps"`
	DebounceAfter    string   `json:"debounce_after"`
	FileDebounce     string   `json:"file_debounce,omitempty"`
	Notes            []string `json:"notes,omitempty"`
}

// measured returns the measured (not warm-up, not failed) rounds of a
// system.
func (c *ConfigResult) measured(system string) []RoundResult {
	var out []RoundResult
	for _, r := range c.Rounds {
		if r.System == system && !r.Warmup && r.Err == "" {
			out = append(out, r)
		}
	}
	return out
}

// summarize applies f to the measured rounds of a system.
func (c *ConfigResult) summarize(system string, f func(*RoundResult) float64) stats.Summary {
	var vs []float64
	for _, r := range c.measured(system) {
		vs = append(vs, f(&r))
	}
	return stats.Summarize(vs)
}

// aboveIdle is a step's CPU less what the control plane's background
// (RoundResult.IdleCores) used over the step's window: what the step
// itself cost. NaN when the background was not measured.
func aboveIdle(step string) func(*RoundResult) float64 {
	return func(r *RoundResult) float64 {
		s := r.Step(step)
		if s == nil || r.IdleCores == 0 || s.Window == 0 {
			return math.NaN()
		}
		return s.CPU - r.IdleCores*s.Window
	}
}

// stepValue returns a function reading one value of one step.
func stepValue(step string, f func(*StepResult) float64) func(*RoundResult) float64 {
	return func(r *RoundResult) float64 {
		s := r.Step(step)
		if s == nil {
			return math.NaN()
		}
		return f(s)
	}
}

// pooledTimes returns the per-proxy convergence times of one step over
// the measured rounds of a system.
func (c *ConfigResult) pooledTimes(system, step string) []float64 {
	var out []float64
	for _, r := range c.measured(system) {
		if s := r.Step(step); s != nil {
			out = append(out, s.Times...)
		}
	}
	return out
}
