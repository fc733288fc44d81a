package runner

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pilotwire/pilotwire/bench/internal/stats"
)

// report builds a report with two systems whose endpoint p99 are given
// per measured round, plus a warm-up and a failed round that must not
// count.
func report(ours, base []float64) *Report {
	rep := &Report{Settings: Settings{Systems: []string{"pilotwire", "go-control-plane"}, Rounds: len(ours), Warmup: 1, DebounceAfter: "100ms", FileDebounce: "25ms"}}
	c := ConfigResult{Proxies: 1000, Mesh: "100x10"}
	round := func(sys string, p99 float64, warmup bool, err string) RoundResult {
		times := []float64{p99 / 2, p99}
		return RoundResult{System: sys, Warmup: warmup, Err: err, Proxies: 1000, Steps: []StepResult{
			{Name: StepInitial, Conv: stats.Describe([]float64{0.5}), CPU: math.NaN()},
			{Name: StepEndpoint, Conv: stats.Sample{N: 2, P50: p99 / 2, P99: p99, Max: p99}, Times: times, ChangedResources: 1, ChangedBytes: 400, CPU: 0.2},
		}}
	}
	c.Rounds = append(c.Rounds, round("pilotwire", 9, true, ""), round("go-control-plane", 9, true, ""))
	for i := range ours {
		c.Rounds = append(c.Rounds, round("pilotwire", ours[i], false, ""), round("go-control-plane", base[i], false, ""))
	}
	c.Rounds = append(c.Rounds, round("pilotwire", 99, false, "boom"))
	rep.Configs = []ConfigResult{c}
	return rep
}

func TestSummaries(t *testing.T) {
	rep := report([]float64{0.3, 0.1, 0.2}, []float64{2, 3, 1})
	c := &rep.Configs[0]
	got := c.summarize("pilotwire", stepValue(StepEndpoint, p99))
	if got.N != 3 || got.Median != 0.2 || got.Min != 0.1 || got.Max != 0.3 {
		t.Errorf("pilotwire endpoint p99 summary %+v; want median 0.2 of 3 rounds (warm-up and failed rounds dropped)", got)
	}
	if times := c.pooledTimes("go-control-plane", StepEndpoint); len(times) != 6 {
		t.Errorf("%d pooled times, want 6", len(times))
	}
}

func TestMarkdown(t *testing.T) {
	var b bytes.Buffer
	report([]float64{0.12, 0.1, 0.14}, []float64{2, 3, 1.5}).WriteMarkdown(&b)
	md := b.String()
	for _, want := range []string{
		"### 1000 proxies, mesh 100x10",
		"| One endpoint changed, p99 | 120 ms (100 ms – 140 ms) | 2.00 s (1.50 s – 3.00 s) | 16.67 | met: ≤ debounce + file quiet + 50 ms = 175ms |",
		// Both systems spend 0.2 CPU-s: under Istio's 0.25 s, not 5x below the baseline.
		"| CPU-seconds, one endpoint changed | 0.20 s | 0.20 s | 1.00 | met: ≤ Istio's CPU (0.25 s); **MISSED**: ≥ 5x below the baseline |",
		"changed resources: 1, 0.4 KiB",
		"pilotwire 3/4 complete",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	b.Reset()
	report([]float64{0.3}, []float64{0.6}).WriteMarkdown(&b)
	if !strings.Contains(b.String(), "**MISSED**: ≤ debounce + file quiet + 50 ms = 175ms") {
		t.Errorf("misses not reported:\n%s", b.String())
	}
}

func TestJSONHasNoNaN(t *testing.T) {
	var b bytes.Buffer
	if err := report([]float64{0.1}, []float64{1}).WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var back struct {
		Configs []struct {
			Rounds []struct {
				Steps []struct {
					Name string   `json:"name"`
					CPU  *float64 `json:"cpu_s"`
				} `json:"steps"`
			} `json:"rounds"`
		} `json:"configs"`
	}
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	st := back.Configs[0].Rounds[0].Steps
	if st[0].Name != StepInitial || st[0].CPU != nil || st[1].CPU == nil || *st[1].CPU != 0.2 {
		t.Errorf("NaN CPU should be null and others kept: %+v %+v", st[0], st[1])
	}
}

func TestPNG(t *testing.T) {
	rep := report([]float64{0.1, 0.2}, []float64{1, 2})
	path := filepath.Join(t.TempDir(), "c.png")
	if err := rep.WritePNG(path, &rep.Configs[0]); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Errorf("not a PNG: %v", err)
	}
}

func TestMetricParse(t *testing.T) {
	// metric() reads a live page; its line parsing is what matters here.
	page := "# HELP x\npilot_x_sum 3.5\npilot_x_count 7\npilot_x_bucket{le=\"1\"} 2\npilot_xy 9\npilot_x{type=\"eds\"} 1\npilot_x{type=\"cds\"} 2\n"
	srv := serve(t, page)
	for _, tc := range []struct {
		name string
		want float64
	}{{"pilot_x_sum", 3.5}, {"pilot_x_count", 7}, {"pilot_x", 3}, {"pilot_xy", 9}} {
		got, ok := metric(t.Context(), srv, tc.name)
		if !ok || got != tc.want {
			t.Errorf("metric %s = %v, %v; want %v", tc.name, got, ok, tc.want)
		}
	}
	if _, ok := metric(t.Context(), srv, "absent"); ok {
		t.Error("absent metric found")
	}
}
