package main

import "testing"

// TestCommandLine: the report's command is one a reader can run again.
// It named bin/pilotwire, which has no run subcommand of that meaning.
func TestCommandLine(t *testing.T) {
	got := commandLine([]string{"/tmp/x/pwbench", "run", "--proxies", "5000"})
	if want := "bin/pwbench run --proxies 5000"; got != want {
		t.Errorf("commandLine = %q, want %q", got, want)
	}
}
