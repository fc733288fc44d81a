package ca_test

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	pb "istio.io/api/security/v1alpha1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/pilotwire/pilotwire/internal/testkit/k8stest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ca"
	"github.com/pilotwire/pilotwire/services/ca/pki"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// logBuffer collects what a CA logs, for the tests that read it.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runningCA is a CA run in-process by runCA.
type runningCA struct {
	svc    *ca.Service
	reg    *prometheus.Registry
	logs   *logBuffer
	health *svc.Health
	ctx    context.Context
	done   chan error
	stop   func()
}

// secrets are strings no CA may ever log: every token a test hands out.
type secrets struct {
	mu   sync.Mutex
	list []string
}

func (s *secrets) add(v string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.list = append(s.list, v)
}

func (s *secrets) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.list...)
}

// runCA runs the CA in-process against cluster c, keeping its Secrets in
// namespace, configured by its flags (args after the kubeconfig,
// namespace and a loopback gRPC address), and waits until it is ready. It
// logs at debug level into a buffer; stopping it (stop, or the test's
// end) checks that the logs hold no private key and none of the tokens in
// never.
func runCA(t *testing.T, c *k8stest.Cluster, namespace string, never *secrets, args ...string) *runningCA {
	t.Helper()
	r := startCA(t, c, namespace, never, args...)
	r.waitReady(t)
	return r
}

// startCA is runCA without the wait.
func startCA(t *testing.T, c *k8stest.Cluster, namespace string, never *secrets, args ...string) *runningCA {
	t.Helper()
	cfg := ca.DefaultConfig()
	fs := pflag.NewFlagSet("ca", pflag.ContinueOnError)
	cfg.AddFlags(fs)
	if err := fs.Parse(append([]string{"--kubeconfig", c.Kubeconfig, "--namespace", namespace, "--grpc-addr", "127.0.0.1:0"}, args...)); err != nil {
		t.Fatal(err)
	}
	logs := &logBuffer{}
	reg := prometheus.NewRegistry()
	health := &svc.Health{}
	d := svc.Deps{
		Log:    slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})).With("component", "ca"),
		Reg:    reg,
		Health: health,
	}
	s, err := ca.New(cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*testutil.DefaultTimeout)
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	var once sync.Once
	r := &runningCA{svc: s, reg: reg, logs: logs, health: health, ctx: ctx, done: done}
	r.stop = func() {
		once.Do(func() {
			cancel()
			if err, ok := testutil.Stopped(t, done, "the CA to stop"); ok && err != nil {
				t.Errorf("CA stopped with: %v", err)
			}
			out := logs.String()
			if strings.Contains(out, "PRIVATE KEY") {
				t.Errorf("the CA logged a private key:\n%s", out)
			}
			for _, tok := range never.all() {
				if strings.Contains(out, tok) {
					t.Errorf("the CA logged a token")
				}
			}
		})
	}
	t.Cleanup(r.stop)
	return r
}

// waitReady waits until the CA serves, and fails the test if it stops
// first.
func (r *runningCA) waitReady(t *testing.T) {
	t.Helper()
	select {
	case <-r.svc.Ready():
	case err := <-r.done:
		r.done <- err // for stop
		t.Fatalf("CA stopped before it was ready: %v\n%s", err, r.logs.String())
	case <-r.ctx.Done():
		t.Fatalf("CA not ready: %v\n%s", r.ctx.Err(), r.logs.String())
	}
	if !r.health.Ready() {
		t.Error("CA ready but /readyz says not")
	}
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	t.Cleanup(cancel)
	return ctx
}

func createNamespace(t *testing.T, ctx context.Context, cs kubernetes.Interface, name string) {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// serviceAccountToken creates the ServiceAccount ns/name if needed and
// returns a token for it with the audiences, as kubelet projects one into
// an Istio pod.
func serviceAccountToken(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, name string, never *secrets, audiences ...string) string {
	t.Helper()
	_, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	seconds := int64(600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: &seconds},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token request for %s/%s: %v", ns, name, err)
	}
	never.add(tr.Status.Token)
	return tr.Status.Token
}

// publishedRoot waits for ns's istio-ca-root-cert to hold want and
// returns it.
func publishedRoot(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns string, want []byte) []byte {
	t.Helper()
	var got string
	testutil.Eventually(t, "istio-ca-root-cert in "+ns, func() bool {
		cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, ca.RootCertConfigMap, metav1.GetOptions{})
		if err != nil {
			return false
		}
		got = cm.Data[ca.RootCertKey]
		return got == string(want)
	})
	return []byte(got)
}

// dial connects to the CA as istio-agent does: TLS, trusting only rootsPEM
// (the published ConfigMap), verifying serverName; with clientCert when
// given.
func dial(t *testing.T, addr string, rootsPEM []byte, serverName string, clientCert *tls.Certificate) pb.IstioCertificateServiceClient {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(rootsPEM) {
		t.Fatal("no root certificate to trust")
	}
	cfg := &tls.Config{RootCAs: roots, ServerName: serverName, MinVersion: tls.VersionTLS12}
	if clientCert != nil {
		cfg.Certificates = []tls.Certificate{*clientCert}
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return pb.NewIstioCertificateServiceClient(conn)
}

// newCSR makes a CSR as istio-agent does (an ECDSA key), claiming names the
// CA must ignore.
func newCSR(t *testing.T) ([]byte, crypto.Signer) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{Organization: []string{"claims"}},
		DNSNames: []string{"istiod.istio-system.svc"},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), key
}

// createCertificate calls CreateCertificate with a bearer token (if any)
// and more metadata pairs.
func createCertificate(ctx context.Context, client pb.IstioCertificateServiceClient, csrPEM []byte, token string, ttlSeconds int64, md ...string) (*pb.IstioCertificateResponse, error) {
	if token != "" {
		md = append(md, "authorization", "Bearer "+token)
	}
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	return client.CreateCertificate(ctx, &pb.IstioCertificateRequest{Csr: string(csrPEM), ValidityDuration: ttlSeconds})
}

// checkChain parses a response chain, checks its order (leaf first, the
// root bundle last, each certificate signed by the next) and that the leaf
// verifies to roots as a client and a server, and returns the leaf.
func checkChain(t *testing.T, chain []string, rootsPEM []byte) *x509.Certificate {
	t.Helper()
	if len(chain) < 2 {
		t.Fatalf("cert chain has %d elements, want the leaf and the root at least", len(chain))
	}
	if chain[len(chain)-1] != string(rootsPEM) {
		t.Errorf("last element of the chain is not the published root bundle")
	}
	var certs []*x509.Certificate
	for i, p := range chain {
		block, rest := pem.Decode([]byte(p))
		if block == nil || len(bytes.TrimSpace(rest)) != 0 && i != len(chain)-1 {
			t.Fatalf("chain element %d is not one PEM certificate", i)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatalf("chain element %d: %v", i, err)
		}
		certs = append(certs, c)
	}
	for i := 0; i+1 < len(certs); i++ {
		if err := certs[i].CheckSignatureFrom(certs[i+1]); err != nil && !bytes.Equal(certs[i].Raw, certs[i+1].Raw) {
			t.Errorf("chain element %d is not signed by element %d: %v", i, i+1, err)
		}
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rootsPEM)
	inter := x509.NewCertPool()
	for _, c := range certs[1 : len(certs)-1] {
		inter.AddCert(c)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth} {
		if _, err := certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("leaf does not verify to the root for %v: %v", usage, err)
		}
	}
	return certs[0]
}

func uriSANs(c *x509.Certificate) []string {
	var out []string
	for _, u := range c.URIs {
		out = append(out, u.String())
	}
	return out
}

// foreignAuthority is a CA unrelated to the one under test.
func foreignAuthority(t *testing.T) *pki.Authority {
	t.Helper()
	certPEM, keyPEM, err := pki.SelfSignedRoot("cluster.local", time.Hour, pki.DefaultRootRSABits, time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	a, err := pki.New(certPEM, keyPEM, nil, certPEM, pki.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return a
}
