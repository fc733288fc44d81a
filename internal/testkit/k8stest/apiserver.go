package k8stest

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
)

// apiserverArgs returns kube-apiserver's flags. Every address is loopback;
// nothing here makes the apiserver dial out (no cloud provider, no
// webhooks, no OIDC, no kubelet until a test asks for logs or exec).
func apiserverArgs(dir, etcdURL string, port int, p *pki, extra []string) []string {
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + filepath.Join(dir, "certs"),
		"--tls-cert-file=" + p.servingCert,
		"--tls-private-key-file=" + p.servingKey,
		// The test client authenticates with a certificate from this CA.
		"--client-ca-file=" + p.caFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + p.serviceAccount,
		"--service-account-signing-key-file=" + p.serviceAccount,
		"--service-cluster-ip-range=10.96.0.0/16",
		// There is no kube-controller-manager: the ServiceAccount plugin
		// would reject every Pod for want of the "default" ServiceAccount
		// its controller creates. The other default plugins work alone
		// (NamespaceLifecycle rejects objects in missing namespaces, as a
		// real cluster does; a deleted namespace stays Terminating, since
		// no namespace controller finalizes it).
		"--disable-admission-plugins=ServiceAccount",
		// The "kubernetes" Service's endpoints would point at 127.0.0.1,
		// which Endpoints validation rejects; leave them out.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--profiling=false",
	}
	return append(args, extra...)
}

// startAPIServer starts kube-apiserver against etcdURL and waits for
// /readyz. port 0 picks a free port (retrying if it is taken before the
// apiserver binds it); a non-zero port is used as is (a restart).
func startAPIServer(ctx context.Context, c *Cluster, port int) (*process, int, error) {
	fixed := port != 0
	var lastErr error
	for range portAttempts {
		if !fixed {
			var err error
			if port, _, err = freePort2(); err != nil {
				return nil, 0, err
			}
		}
		args := apiserverArgs(c.dir, c.etcdURL, port, c.pki, c.opts.apiserverFlags)
		p, err := startProcess("kube-apiserver", c.bins.apiserver, args, filepath.Join(c.dir, "kube-apiserver.log"))
		if err != nil {
			return nil, 0, err
		}
		host := "https://127.0.0.1:" + strconv.Itoa(port)
		err = waitReady(ctx, []*process{p, c.etcdProc()}, func(ctx context.Context) error {
			return apiserverReady(ctx, c.httpClient, host)
		})
		if err == nil {
			return p, port, nil
		}
		_ = p.stop()
		if fixed || !isPortInUse(err) {
			return nil, 0, fmt.Errorf("kube-apiserver: %w", err)
		}
		lastErr = err
	}
	return nil, 0, fmt.Errorf("kube-apiserver: %w", lastErr)
}

// apiserverReady is one readiness probe: /readyz passes (etcd reachable,
// every post-start hook done, RBAC bootstrapped) and the "default"
// namespace exists. The namespace is created by a controller inside the
// apiserver shortly after start; if it is not there yet we create it, which
// is what that controller would do.
func apiserverReady(ctx context.Context, hc *http.Client, host string) error {
	if err := expectStatus(ctx, hc, http.MethodGet, host+"/readyz", nil, http.StatusOK); err != nil {
		return err
	}
	err := expectStatus(ctx, hc, http.MethodGet, host+"/api/v1/namespaces/default", nil, http.StatusOK)
	if err == nil {
		return nil
	}
	ns := []byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"default"}}`)
	return expectStatus(ctx, hc, http.MethodPost, host+"/api/v1/namespaces", ns, http.StatusCreated, http.StatusConflict)
}

// expectStatus sends one request and fails unless the status is one of want.
func expectStatus(ctx context.Context, hc *http.Client, method, url string, body []byte, want ...int) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	for _, w := range want {
		if resp.StatusCode == w {
			return nil
		}
	}
	return fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, bytes.TrimSpace(msg))
}
