package main

import (
	"testing"
	"time"

	"github.com/pilotwire/pilotwire/pkg/debounce"
	"github.com/pilotwire/pilotwire/services/ingest/filesource"
)

// TestCommandLine: the report's command is one a reader can run again.
// It named bin/pilotwire, which has no run subcommand of that meaning.
func TestCommandLine(t *testing.T) {
	got := commandLine([]string{"/tmp/x/pwbench", "run", "--proxies", "5000"})
	if want := "bin/pwbench run --proxies 5000"; got != want {
		t.Errorf("commandLine = %q, want %q", got, want)
	}
}

// TestBaselineWaitsAsIngest: both systems wait the same quiet time on a
// changed file, so a change's latency compares the servers. The baseline
// waited 100 ms by default while pilotwire's ingest waits 25 ms.
func TestBaselineWaitsAsIngest(t *testing.T) {
	for _, tc := range []struct {
		name         string
		args         []string
		wantBaseline time.Duration
		wantWaits    waits
	}{
		{name: "defaults", wantBaseline: filesource.DefaultQuiet,
			wantWaits: waits{fileQuiet: filesource.DefaultQuiet, debounceAfter: debounce.DefaultDebounceAfter}},
		{name: "ingest's quiet set for pilotwire", args: []string{"--ours-env", "PILOTWIRE_FILE_DEBOUNCE=10ms", "--ours-env", "PILOT_DEBOUNCE_AFTER=50ms"},
			wantBaseline: 10 * time.Millisecond, wantWaits: waits{fileQuiet: 10 * time.Millisecond, debounceAfter: 50 * time.Millisecond}},
		{name: "baseline's own", args: []string{"--baseline-debounce", "100ms"}, wantBaseline: 100 * time.Millisecond,
			wantWaits: waits{fileQuiet: filesource.DefaultQuiet, debounceAfter: debounce.DefaultDebounceAfter}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c benchConfig
			if err := newBenchCmdOn(&c).ParseFlags(tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := c.resolveWaits()
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.wantWaits {
				t.Errorf("pilotwire waits %+v, want %+v", got, tc.wantWaits)
			}
			if c.BaselineDebounce != tc.wantBaseline {
				t.Errorf("baseline waits %v on a changed file, want %v", c.BaselineDebounce, tc.wantBaseline)
			}
		})
	}
}
