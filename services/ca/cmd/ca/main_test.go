package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/pilotwire/pilotwire/internal/testkit/k8stest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func freeAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// TestBinaryBecomesReady runs the command in-process against a real
// kube-apiserver, with no NATS anywhere, and waits for /readyz; /metrics
// then has Istio's CA metrics.
func TestBinaryBecomesReady(t *testing.T) {
	c := k8stest.Start(t)
	httpAddr := freeAddr(t)
	cmd := newCommand()
	cmd.SetArgs([]string{"--kubeconfig", c.Kubeconfig, "--namespace", "default", "--grpc-addr", "127.0.0.1:0",
		"--http-addr", httpAddr, "--debug-addr", "", "--log-level", "warn"})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	client := &http.Client{Timeout: testutil.DefaultTimeout, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(path string) (int, string) {
		resp, err := client.Get("http://" + httpAddr + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	testutil.Eventually(t, "/readyz", func() bool {
		code, _ := get("/readyz")
		return code == http.StatusOK
	})
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, "citadel_server_csr_count 0") || !strings.Contains(body, "citadel_server_root_cert_expiry_timestamp") {
		t.Errorf("/metrics = %d, want Istio's CA metrics:\n%s", code, body)
	}
	cancel()
	if err, ok := testutil.Stopped(t, done, "the command to stop"); ok && err != nil {
		t.Fatalf("command: %v", err)
	}
}

func TestCommandRejectsNoCluster(t *testing.T) {
	t.Setenv("PILOTWIRE_KUBECONFIG", "")
	t.Setenv("PILOTWIRE_IN_CLUSTER", "")
	cmd := newCommand()
	cmd.SetArgs([]string{"--http-addr", "127.0.0.1:0"})
	err := cmd.ExecuteContext(t.Context())
	if err == nil || !strings.Contains(err.Error(), "no cluster") {
		t.Fatalf("command without a cluster: %v, want a no-cluster error", err)
	}
}

func TestCommandHasNoNATSFlags(t *testing.T) {
	cmd := newCommand()
	if f := cmd.Flags().Lookup("nats-url"); f != nil {
		t.Errorf("the CA has a --nats-url flag: it must not reach NATS")
	}
	for _, name := range []string{"grpc-addr", "kubeconfig", "in-cluster", "namespace", "trust-domain", "token-audiences", "dns-name",
		"workload-cert-ttl", "max-workload-cert-ttl", "self-signed-ca-cert-ttl", "ca-rsa-key-size", "cluster-id", "http-addr"} {
		if cmd.Flags().Lookup(name) == nil {
			t.Errorf("no --%s flag", name)
		}
	}
}
