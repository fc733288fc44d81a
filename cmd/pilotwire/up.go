package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/pilotwire/pilotwire/pkg/natsembed"
	"github.com/pilotwire/pilotwire/pkg/svc"
)

type upConfig struct {
	ConfigDir  string
	Kubeconfig string
	ADSAddr    string
	HTTPAddr   string
	DataDir    string
	NATSAddr   string
	Prefix     string
	BinDir     string
	LogLevel   string
	// FileClusterID, if set, is ingest's cluster id for --config-dir.
	FileClusterID string
	// beforeServices, if set, runs once NATS is up, before the services
	// start (replay --up copies the history in).
	beforeServices func(ctx context.Context, natsURL string) error
}

func newUpCmd() *cobra.Command {
	var c upConfig
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Run embedded NATS and the four services on this machine",
		Long: `up starts an embedded nats-server with JetStream (file storage under
--data-dir) and runs ingest (watching --config-dir), debouncer, pusher and
one ads frontend as separate processes on loopback. Ctrl-C stops everything.

Each service serves /healthz, /readyz and /metrics: up itself on --http-addr,
then ingest, debouncer, pusher and ads on the next four ports; each
service's /debug/* and pprof are on 127.0.0.1 at its port + 100.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// With a cluster to watch, the example directory is only
			// served when asked for.
			if c.Kubeconfig != "" && !cmd.Flags().Changed("config-dir") {
				c.ConfigDir = ""
			}
			return runUp(cmd.Context(), c)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&c.ConfigDir, "config-dir", "deploy/examples", "directory of Kubernetes YAML manifests to serve")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "also watch the Kubernetes cluster of this kubeconfig (cluster id Kubernetes; manifests of --config-dir then get cluster id files)")
	fs.StringVar(&c.ADSAddr, "ads-addr", "127.0.0.1:15010", "gRPC ADS address of the frontend")
	fs.StringVar(&c.HTTPAddr, "http-addr", "127.0.0.1:9090", "health/metrics address of up; services take the next four ports")
	fs.StringVar(&c.DataDir, "data-dir", ".data", "JetStream storage directory")
	fs.StringVar(&c.NATSAddr, "nats-addr", "127.0.0.1:4222", "embedded NATS listen address")
	fs.StringVar(&c.Prefix, "prefix", "pw", "subject prefix")
	fs.StringVar(&c.BinDir, "bin-dir", "", "directory of the service binaries (default: next to pilotwire)")
	fs.StringVar(&c.LogLevel, "log-level", "info", "log level of every service")
	return cmd
}

type child struct {
	name string
	http string
	cmd  *exec.Cmd
	done chan error
}

func runUp(ctx context.Context, c upConfig) error {
	log, err := svc.NewLogger(os.Stderr, c.LogLevel, "text", "up")
	if err != nil {
		return err
	}
	if c.BinDir == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("find own binary: %w", err)
		}
		c.BinDir = filepath.Dir(exe)
	}
	if c.ConfigDir != "" {
		if _, err := os.Stat(c.ConfigDir); err != nil {
			return fmt.Errorf("config dir: %w", err)
		}
	}
	host, portStr, err := net.SplitHostPort(c.HTTPAddr)
	if err != nil {
		return fmt.Errorf("--http-addr: %w", err)
	}
	basePort, err := strconv.Atoi(portStr)
	if err != nil {
		return fmt.Errorf("--http-addr port: %w", err)
	}
	httpAddr := func(i int) string { return net.JoinHostPort(host, strconv.Itoa(basePort+i)) }

	if err := os.MkdirAll(c.DataDir, 0o755); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	ns, err := natsembed.Start(natsembed.Options{Addr: c.NATSAddr, StoreDir: filepath.Join(c.DataDir, "jetstream")})
	if err != nil {
		return err
	}
	defer ns.Shutdown()
	fmt.Printf("nats      ready  %s (JetStream in %s)\n", ns.URL(), filepath.Join(c.DataDir, "jetstream"))
	// up owns its NATS: it makes the streams as declared (a data dir of an
	// older version included) before the services check them.
	if err := upStreams(ctx, ns.URL(), c.Prefix, log); err != nil {
		return err
	}
	if c.beforeServices != nil {
		if err := c.beforeServices(ctx, ns.URL()); err != nil {
			return err
		}
	}

	common := func(i int) []string {
		return []string{"--nats-url", ns.URL(), "--prefix", c.Prefix, "--http-addr", httpAddr(i),
			"--debug-addr", svc.DefaultDebugAddr(httpAddr(i)), "--log-level", c.LogLevel}
	}
	specs := []struct {
		name string
		args []string
	}{
		{"ingest", append(common(1), ingestArgs(c)...)},
		{"debouncer", common(2)},
		{"pusher", common(3)},
		{"ads", append(common(4), "--ads-addr", c.ADSAddr)},
	}

	// up's own health: ready when every service is.
	health := &svc.Health{}
	hs := svc.NewHTTPServer(httpAddr(0), svc.NewRegistry(), health, log)
	if err := hs.Listen(); err != nil {
		return err
	}
	hctx, hcancel := context.WithCancel(context.Background())
	var hwg sync.WaitGroup
	hwg.Add(1)
	go func() { defer hwg.Done(); _ = hs.Serve(hctx) }()
	defer func() { hcancel(); hwg.Wait() }()

	var children []*child
	defer func() { stopChildren(children, log) }()
	for i, s := range specs {
		ch := &child{name: s.name, http: httpAddr(i + 1), done: make(chan error, 1)}
		ch.cmd = exec.Command(filepath.Join(c.BinDir, s.name), s.args...)
		ch.cmd.Stdout = os.Stdout
		ch.cmd.Stderr = os.Stderr
		if err := ch.cmd.Start(); err != nil {
			return fmt.Errorf("start %s (build it with `make build`): %w", s.name, err)
		}
		go func() { ch.done <- ch.cmd.Wait() }()
		children = append(children, ch)
	}
	for _, ch := range children {
		if err := waitReady(ctx, ch, 60*time.Second); err != nil {
			return err
		}
		fmt.Printf("%-9s ready  http://%s (pid %d)\n", ch.name, ch.http, ch.cmd.Process.Pid)
	}
	health.SetReady()
	fmt.Printf("pilotwire up: ADS on %s, watching %s, health on http://%s/readyz\n", c.ADSAddr, watching(c), httpAddr(0))

	// Run until Ctrl-C or until a service dies.
	cases := make(chan string, len(children))
	for _, ch := range children {
		go func() {
			err := <-ch.done
			ch.done <- err // keep it for stopChildren
			cases <- fmt.Sprintf("%s exited: %v", ch.name, err)
		}()
	}
	select {
	case <-ctx.Done():
		fmt.Println("stopping")
		return nil
	case why := <-cases:
		return errors.New(why)
	}
}

// waitReady polls a service's /readyz until it answers 200, the service
// exits, or the deadline passes.
func waitReady(ctx context.Context, ch *child, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for {
		resp, err := client.Get("http://" + ch.http + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready within %s", ch.name, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case err := <-ch.done:
			ch.done <- err
			return fmt.Errorf("%s exited before ready: %v", ch.name, err)
		case <-t.C:
		}
	}
}

// stopChildren sends SIGTERM to every service, in reverse start order, and
// kills any that has not exited within 15 s.
func stopChildren(children []*child, log *slog.Logger) {
	for i := len(children) - 1; i >= 0; i-- {
		ch := children[i]
		_ = ch.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(15 * time.Second)
		select {
		case <-ch.done:
		case <-t.C:
			log.Warn("service did not stop, killing it", "service", ch.name)
			_ = ch.cmd.Process.Kill()
			<-ch.done
		}
		t.Stop()
	}
}

// ingestArgs are the source flags of the ingest child.
func ingestArgs(c upConfig) []string {
	var args []string
	if c.ConfigDir != "" {
		args = append(args, "--config-dir", c.ConfigDir)
	}
	if c.FileClusterID != "" {
		args = append(args, "--file-cluster-id", c.FileClusterID)
	}
	if c.Kubeconfig != "" {
		args = append(args, "--kubeconfig", c.Kubeconfig)
		if c.ConfigDir != "" && c.FileClusterID == "" {
			args = append(args, "--file-cluster-id", "files")
		}
	}
	return args
}

func watching(c upConfig) string {
	switch {
	case c.ConfigDir != "" && c.Kubeconfig != "":
		return c.ConfigDir + " and the cluster of " + c.Kubeconfig
	case c.Kubeconfig != "":
		return "the cluster of " + c.Kubeconfig
	}
	return c.ConfigDir
}

// upStreams applies every declared stream and bucket of the mesh to the
// embedded server, logging what it created or changed.
func upStreams(ctx context.Context, url, prefix string, log *slog.Logger) error {
	ctx, s, done, err := connConfig{NATSURL: url, Prefix: prefix, Timeout: 30 * time.Second}.open(ctx)
	if err != nil {
		return err
	}
	defer done()
	statuses, err := applyStreams(ctx, s, 0, true)
	if err != nil {
		return err
	}
	for _, st := range statuses {
		if !st.OK() {
			log.Info("stream applied", "kind", st.Kind, "name", st.Name, "created", st.Missing, "changed", fmt.Sprint(st.Drift))
		}
	}
	return nil
}
