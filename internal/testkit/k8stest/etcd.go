package k8stest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
)

// etcdArgs returns the flags for a single-member etcd on loopback with its
// data in dataDir. fsync is off: the data dies with the test anyway.
func etcdArgs(dataDir string, clientPort, peerPort int) []string {
	client := "http://127.0.0.1:" + strconv.Itoa(clientPort)
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	return []string{
		"--name=k8stest",
		"--data-dir=" + dataDir,
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=k8stest=" + peer,
		"--initial-cluster-state=new",
		"--unsafe-no-fsync=true",
		"--log-level=warn",
	}
}

// startEtcd starts etcd in dir and waits until it answers /health. It
// retries with fresh ports when a picked port was taken in the meantime.
func startEtcd(ctx context.Context, bin, dir string) (*process, string, error) {
	var lastErr error
	for attempt := range portAttempts {
		clientPort, peerPort, err := freePort2()
		if err != nil {
			return nil, "", err
		}
		url := "http://127.0.0.1:" + strconv.Itoa(clientPort)
		dataDir := filepath.Join(dir, fmt.Sprintf("etcd-data-%d", attempt))
		p, err := startProcess("etcd", bin, etcdArgs(dataDir, clientPort, peerPort), filepath.Join(dir, "etcd.log"))
		if err != nil {
			return nil, "", err
		}
		err = waitReady(ctx, []*process{p}, func(ctx context.Context) error {
			return etcdHealthy(ctx, url)
		})
		if err == nil {
			return p, url, nil
		}
		_ = p.stop()
		if !isPortInUse(err) {
			return nil, "", fmt.Errorf("etcd: %w", err)
		}
		lastErr = err
	}
	return nil, "", fmt.Errorf("etcd: %w", lastErr)
}

// etcdHealthy asks etcd's /health endpoint.
func etcdHealthy(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := loopbackHTTP.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("etcd /health: %s: %s", resp.Status, body)
	}
	return nil
}
