package k8stest

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

// DeadKubeconfig writes a kubeconfig whose server is a closed loopback
// port: a cluster that never answers, for timeout tests.
func DeadKubeconfig(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	path := filepath.Join(t.TempDir(), "dead.kubeconfig")
	kc := `apiVersion: v1
kind: Config
clusters: [{name: dead, cluster: {server: "https://` + addr + `", insecure-skip-tls-verify: true}}]
users: [{name: dead, user: {token: t0ken}}]
contexts: [{name: dead, context: {cluster: dead, user: dead}}]
current-context: dead
`
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}
