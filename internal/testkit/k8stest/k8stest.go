// Package k8stest runs a real Kubernetes control plane for tests: an etcd
// and a kube-apiserver as child processes on random loopback ports, with
// their data in t.TempDir(). There is no scheduler, no controller manager
// and no kubelet; objects are stored and watched exactly as in a real
// cluster, which is what an informer-driven source needs.
//
// The binaries come from hack/k8s-binaries.sh, which builds them from the Go
// module proxy into .cache/k8s/bin (or $PILOTWIRE_K8S_BIN). Start fails the
// test, naming that script, when they are missing: tests never skip.
//
//	c := k8stest.Start(t)
//	cs := kubernetes.NewForConfigOrDie(c.Config)
//
// Each Start is an independent cluster, so a multi-cluster test calls it
// once per cluster. Start costs a few seconds (kube-apiserver bootstrap
// dominates); share one cluster among the subtests of a test where the
// subtests use separate namespaces.
package k8stest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// defaultStartTimeout bounds Start (and RestartAPIServer). A cold
// kube-apiserver on 2 busy cores can take well over 10s.
const defaultStartTimeout = 2 * time.Minute

// Cluster is one running etcd + kube-apiserver pair.
type Cluster struct {
	// Config reaches the apiserver as user "pilotwire-test" in group
	// system:masters (a client certificate), verifying the serving
	// certificate against the cluster's own CA. It is shared: copy it with
	// rest.CopyConfig before changing it.
	Config *rest.Config
	// Kubeconfig is the path of a kubeconfig file with the same server and
	// credentials, for code that takes a kubeconfig path.
	Kubeconfig string

	// Set at start, read-only after.
	t          testing.TB // nil for a cluster of Run
	logf       func(format string, args ...any)
	opts       options
	bins       binaries
	dir        string
	pki        *pki
	etcdURL    string
	port       int          // kube-apiserver's secure port, kept across restarts
	httpClient *http.Client // Config's transport, for readiness probes

	// Guarded by mu.
	mu        sync.Mutex
	etcd      *process
	apiserver *process // nil while stopped
	stopped   bool     // Stop was called; the cluster cannot come back
}

// Option changes how Start runs the cluster.
type Option func(*options)

type options struct {
	apiserverFlags []string
	startTimeout   time.Duration
}

// WithAPIServerFlags appends flags (e.g. "--feature-gates=Foo=true") to
// kube-apiserver's command line; a later flag overrides an earlier one.
func WithAPIServerFlags(flags ...string) Option {
	return func(o *options) { o.apiserverFlags = append(o.apiserverFlags, flags...) }
}

// WithStartTimeout replaces the default bound (2 minutes) on Start and
// RestartAPIServer.
func WithStartTimeout(d time.Duration) Option {
	return func(o *options) { o.startTimeout = d }
}

// Start runs a new cluster and returns once the apiserver is ready and the
// "default" namespace exists. It stops the cluster at the end of the test.
// It must be called from the test's goroutine. Under -short it skips the
// test (`make test-short` builds no kube-apiserver); otherwise it fails the
// test, never skips, when the binaries are missing or the cluster does not
// come up.
func Start(t testing.TB, opts ...Option) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("k8stest: needs etcd and kube-apiserver; skipped under -short")
	}
	o := options{startTimeout: defaultStartTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	bins, err := findBinaries()
	if err != nil {
		t.Fatalf("k8stest: %v", err)
	}
	// TempDir before Cleanup: cleanups run last-in first-out, so the
	// children are stopped before their data directory is removed.
	c := &Cluster{t: t, logf: t.Logf, opts: o, bins: bins, dir: t.TempDir()}
	t.Cleanup(c.cleanup)

	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), o.startTimeout)
	defer cancel()
	if err := c.start(ctx); err != nil {
		t.Fatalf("k8stest: %v", err)
	}
	t.Logf("k8stest: cluster %s ready in %v (logs in %s)", c.Config.Host, time.Since(began).Round(time.Millisecond), c.dir)
	return c
}

// Run runs a new cluster outside a test (a benchmark harness), with its
// data and logs in dir, and returns once the apiserver is ready and the
// "default" namespace exists. logf receives what Stop has to say. The
// caller stops the cluster with Stop; on an error nothing is left running.
func Run(ctx context.Context, dir string, logf func(format string, args ...any), opts ...Option) (*Cluster, error) {
	o := options{startTimeout: defaultStartTimeout}
	for _, opt := range opts {
		opt(&o)
	}
	bins, err := findBinaries()
	if err != nil {
		return nil, fmt.Errorf("k8stest: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("k8stest: %w", err)
	}
	c := &Cluster{logf: logf, opts: o, bins: bins, dir: dir}
	ctx, cancel := context.WithTimeout(ctx, o.startTimeout)
	defer cancel()
	if err := c.start(ctx); err != nil {
		c.Stop()
		return nil, fmt.Errorf("k8stest: %w (logs in %s)", err, dir)
	}
	return c, nil
}

func (c *Cluster) start(ctx context.Context) error {
	var err error
	if c.pki, err = newPKI(c.dir); err != nil {
		return err
	}
	etcd, url, err := startEtcd(ctx, c.bins.etcd, c.dir)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.etcd, c.etcdURL = etcd, url
	c.mu.Unlock()

	c.Config = &rest.Config{
		TLSClientConfig: rest.TLSClientConfig{
			CAData:   c.pki.caPEM,
			CertData: c.pki.clientCertPEM,
			KeyData:  c.pki.clientKeyPEM,
		},
		// client-go's default of 5 QPS would make the tests crawl.
		QPS:   100,
		Burst: 200,
	}
	if c.httpClient, err = rest.HTTPClientFor(c.Config); err != nil {
		return fmt.Errorf("http client: %w", err)
	}
	apiserver, port, err := startAPIServer(ctx, c, 0)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.apiserver, c.port = apiserver, port
	c.mu.Unlock()
	c.Config.Host = "https://127.0.0.1:" + strconv.Itoa(port)
	// The probes' keep-alive connections would otherwise idle on (as
	// goroutines) until the apiserver goes away.
	c.httpClient.CloseIdleConnections()

	c.Kubeconfig = filepath.Join(c.dir, "kubeconfig")
	return writeKubeconfig(c.Kubeconfig, c.Config)
}

// Stop stops kube-apiserver, then etcd (SIGTERM, SIGKILL after 15s) and
// waits for both to exit. It is idempotent and also runs at the end of the
// test; after it the cluster is gone for good.
func (c *Cluster) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return
	}
	c.stopped = true
	var errs []error
	if c.apiserver != nil {
		errs = append(errs, c.apiserver.stop())
		c.apiserver = nil
	}
	if c.etcd != nil {
		errs = append(errs, c.etcd.stop())
	}
	if err := errors.Join(errs...); err != nil {
		c.logf("k8stest: stop: %v", err)
	}
}

// StopAPIServer stops only kube-apiserver (SIGTERM, SIGKILL after 15s): a
// client sees connections refused, while etcd keeps every object for
// RestartAPIServer. It is a no-op if the apiserver is already stopped.
func (c *Cluster) StopAPIServer() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.apiserver == nil {
		return
	}
	if err := c.apiserver.stop(); err != nil {
		c.logf("k8stest: stop kube-apiserver: %v", err)
	}
	c.apiserver = nil
}

// RestartAPIServer starts kube-apiserver again after StopAPIServer, on the
// same port and etcd, so Config and Kubeconfig stay valid and resource
// versions continue. It returns once the apiserver is ready. It must be
// called from the test's goroutine.
func (c *Cluster) RestartAPIServer(t testing.TB) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.stopped:
		t.Fatalf("k8stest: RestartAPIServer after Stop")
	case c.apiserver != nil:
		t.Fatalf("k8stest: RestartAPIServer while the apiserver runs; call StopAPIServer first")
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.startTimeout)
	defer cancel()
	began := time.Now()
	p, _, err := startAPIServer(ctx, c, c.port)
	if err != nil {
		t.Fatalf("k8stest: restart: %v", err)
	}
	c.apiserver = p
	c.httpClient.CloseIdleConnections()
	t.Logf("k8stest: kube-apiserver %s restarted in %v", c.Config.Host, time.Since(began).Round(time.Millisecond))
}

// etcdProc returns the etcd process, for start-up probes that must notice
// it dying.
func (c *Cluster) etcdProc() *process {
	// Called from startAPIServer, possibly with mu held by RestartAPIServer;
	// etcd is set before any apiserver starts and never changes after.
	return c.etcd
}

// cleanup runs at the end of the test: on failure it logs the tail of each
// child's output, which t.TempDir is about to delete, then stops both.
func (c *Cluster) cleanup() {
	if c.t.Failed() {
		for _, name := range []string{"etcd.log", "kube-apiserver.log"} {
			path := filepath.Join(c.dir, name)
			if _, err := os.Stat(path); err == nil {
				c.t.Logf("k8stest: last lines of %s:\n%s", name, tailFile(path, 30))
			}
		}
	}
	c.Stop()
}
