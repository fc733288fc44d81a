package baseline

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestWatcherBatches: a burst of writes, including a hidden temporary
// file renamed into place and a new subdirectory, arrives as one batch of
// manifest paths once the directory is quiet.
func TestWatcherBatches(t *testing.T) {
	dir := t.TempDir()
	w, err := newWatcher(dir, 30*time.Millisecond, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer w.close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx) }()
	defer func() { cancel(); <-done }()

	write := func(name string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(".a.yaml.tmp")
	if err := os.Rename(filepath.Join(dir, ".a.yaml.tmp"), filepath.Join(dir, "a.yaml")); err != nil {
		t.Fatal(err)
	}
	write("b.yml")
	write("notes.txt")
	write("sub/c.json")

	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	got := make(map[string]bool)
	for len(got) < 3 {
		select {
		case batch := <-w.batches:
			for _, f := range batch {
				got[f] = true
			}
		case <-timeout.C:
			t.Fatalf("timed out; got %v", got)
		}
	}
	want := map[string]bool{"a.yaml": true, "b.yml": true, filepath.Join("sub", "c.json"): true}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("changed paths (-want +got):\n%s", diff)
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Error("no directory: want an error")
	}
	if _, err := New(Config{Dir: t.TempDir(), ADSAddr: "127.0.0.1:0", EDS: "lru"}); err == nil {
		t.Error("unknown EDS cache: want an error")
	}
}
