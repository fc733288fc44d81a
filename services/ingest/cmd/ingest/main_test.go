package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/services/ingest/internal/ingesttest"
)

// nats.go's own leak on an object store Put (natstest.UpstreamLeaks) is
// ignored; every other goroutine is checked.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m, natstest.UpstreamLeaks()...) }

// TestBinaryBecomesReady runs the command in-process against a real
// JetStream and waits for /readyz.
func TestBinaryBecomesReady(t *testing.T) {
	url := natstest.Start(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "svc.yaml"), []byte("apiVersion: v1\nkind: Service\nmetadata: {name: a}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()

	cmd := newCommand()
	cmd.SetArgs([]string{"--nats-url", url, "--config-dir", dir, "--http-addr", addr, "--log-level", "warn"})
	ctx, cancel := context.WithTimeout(context.Background(), ingesttest.Timeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	client := &http.Client{Timeout: time.Second}
	ingesttest.WaitFor(t, ctx, "/readyz", func() (bool, string) {
		resp, err := client.Get("http://" + addr + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode == http.StatusOK, string(body)
	})
	client.CloseIdleConnections()
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("command: %v", err)
	}
}

func TestCommandRejectsMissingConfigDir(t *testing.T) {
	t.Setenv("PILOTWIRE_CONFIG_DIR", "")
	cmd := newCommand()
	cmd.SetArgs([]string{})
	if err := cmd.ExecuteContext(t.Context()); err == nil {
		t.Fatal("command without --config-dir succeeded")
	}
}

func TestCommandRejectsBadClusterFlag(t *testing.T) {
	cmd := newCommand()
	cmd.SetArgs([]string{"--cluster", "west"})
	err := cmd.ExecuteContext(t.Context())
	if err == nil || !strings.Contains(err.Error(), "want ID=KUBECONFIG") {
		t.Fatalf("command with --cluster west: %v, want a format error", err)
	}
}
