package procstat

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

func TestSelf(t *testing.T) {
	pid := os.Getpid()
	// Burn a little CPU so that the counter moves.
	start, err := CPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(50 * time.Millisecond)
	x := 0
	for time.Now().Before(deadline) {
		x++
	}
	end, err := CPU(pid)
	if err != nil {
		t.Fatal(err)
	}
	if end < start {
		t.Errorf("CPU went backwards: %v -> %v", start, end)
	}
	rss, err := RSS(pid)
	if err != nil || rss < 1<<20 {
		t.Errorf("RSS = %d, %v; want at least 1 MiB", rss, err)
	}
	before, err := MinorFaults(pid)
	if err != nil {
		t.Fatal(err)
	}
	touch := make([]byte, 8<<20) // fresh pages: each first write faults
	for i := 0; i < len(touch); i += 4096 {
		touch[i] = 1
	}
	if after, err := MinorFaults(pid); err != nil || after < before+1000 {
		t.Errorf("minor faults %d -> %d (%v) after touching 2,048 fresh pages; want at least 1,000 more", before, after, err)
	}
	if pp, err := PPID(pid); err != nil || pp != os.Getppid() {
		t.Errorf("PPID = %d, %v; want %d", pp, err, os.Getppid())
	}
}

func TestTree(t *testing.T) {
	cmd := exec.Command("sleep", "5")
	if err := cmd.Start(); err != nil {
		t.Skip("no sleep binary:", err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	tree, err := Tree(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if tree[0] != os.Getpid() || !slices.Contains(tree, cmd.Process.Pid) {
		t.Errorf("Tree = %v, want this process first and the child %d in it", tree, cmd.Process.Pid)
	}
	if TreeCPU([]int{os.Getpid(), 1 << 30}) <= 0 {
		t.Error("TreeCPU of this process and a missing one is not positive")
	}
}
