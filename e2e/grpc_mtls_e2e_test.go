package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"
	cav1 "istio.io/api/security/v1alpha1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/pilotwire/pilotwire/internal/testkit/k8stest"
	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ca"
)

// The proxyless gRPC mesh of TestGRPCXDSCredentials: the echo-server
// Service in default, backed by the pod echo-server-0 at 127.0.0.1 (service
// account server, labelled as using xDS credentials), under a STRICT
// PeerAuthentication for the namespace.
const grpcMTLSMesh = `apiVersion: v1
kind: Service
metadata: {name: echo-server, namespace: default}
spec:
  clusterIP: 10.96.0.31
  ports:
  - {name: grpc, port: 8080}
---
apiVersion: v1
kind: Pod
metadata:
  name: echo-server-0
  namespace: default
  labels: {app: echo-server, security.istio.io/tlsMode: istio}
spec: {serviceAccountName: server}
status: {podIP: 127.0.0.1}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: echo-server-1
  namespace: default
  labels: {kubernetes.io/service-name: echo-server}
addressType: IPv4
ports:
- {name: grpc, port: %d}
endpoints:
- addresses: ["127.0.0.1"]
  conditions: {ready: true}
  zone: zone-a
  targetRef: {kind: Pod, name: echo-server-0, namespace: default}
---
apiVersion: security.istio.io/v1
kind: PeerAuthentication
metadata: {name: default, namespace: default}
spec:
  mtls: {mode: STRICT}
`

// identityServer answers UnaryCall with the SPIFFE identity of the
// caller's certificate, as its xDS server credentials saw it.
type identityServer struct {
	testgrpc.UnimplementedTestServiceServer
}

func (identityServer) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Hostname: "echo-server", Username: peerIdentity(ctx)}, nil
}

func (identityServer) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	return &testgrpc.Empty{}, nil
}

// peerIdentity is the URI SAN of the peer's certificate, "" without one.
func peerIdentity(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return ""
	}
	return tlsIdentity(p.AuthInfo)
}

func tlsIdentity(ai credentials.AuthInfo) string {
	info, ok := ai.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return ""
	}
	var uris []string
	for _, u := range info.State.PeerCertificates[0].URIs {
		uris = append(uris, u.String())
	}
	return strings.Join(uris, ",")
}

// workloadCerts gets a certificate for ServiceAccount default/sa from the
// CA at caAddr (trusting roots) with the account's token, as istio-agent
// does, and writes cert-chain.pem, key.pem and root-cert.pem to a
// directory of its own, the files of Istio's gRPC bootstrap; it returns
// the directory.
func workloadCerts(t *testing.T, ctx context.Context, kube kubernetes.Interface, caAddr string, roots []byte, sa string) string {
	t.Helper()
	_, err := kube.CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	seconds := int64(600)
	tr, err := kube.CoreV1().ServiceAccounts("default").CreateToken(ctx, sa, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{"istio-ca"}, ExpirationSeconds: &seconds},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s: %v", sa, err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(roots) {
		t.Fatal("no CA root")
	}
	conn, err := grpc.NewClient(caAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: pool, ServerName: "istiod.istio-system.svc", MinVersion: tls.VersionTLS12,
	})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	resp, err := cav1.NewIstioCertificateServiceClient(conn).CreateCertificate(
		metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tr.Status.Token),
		&cav1.IstioCertificateRequest{Csr: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: csr}))})
	if err != nil {
		t.Fatalf("CreateCertificate for %s: %v", sa, err)
	}
	chain := resp.GetCertChain()
	if len(chain) < 2 {
		t.Fatalf("chain of %d certificates for %s", len(chain), sa)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, content := range map[string]string{
		"cert-chain.pem": strings.Join(chain[:len(chain)-1], ""),
		"key.pem":        string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})),
		"root-cert.pem":  chain[len(chain)-1],
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// grpcBootstrapFor is Istio's proxyless bootstrap for a pod at ip in
// default: with labels (node metadata LABELS) when given, and with the
// certificate provider "default" on the files in certDir when given.
func grpcBootstrapFor(t *testing.T, ads, ip, pod string, labels map[string]string, certDir string) []byte {
	t.Helper()
	md := map[string]any{"GENERATOR": "grpc", "NAMESPACE": "default"}
	if labels != nil {
		md["LABELS"] = labels
	}
	b := map[string]any{
		"xds_servers":                            []any{map[string]any{"server_uri": ads, "channel_creds": []any{map[string]any{"type": "insecure"}}, "server_features": []any{"xds_v3"}}},
		"node":                                   map[string]any{"id": fmt.Sprintf("sidecar~%s~%s.default~default.svc.cluster.local", ip, pod), "metadata": md},
		"server_listener_resource_name_template": "xds.istio.io/grpc/lds/inbound/%s",
	}
	if certDir != "" {
		b["certificate_providers"] = map[string]any{"default": map[string]any{
			"plugin_name": "file_watcher",
			"config": map[string]any{
				"certificate_file":    filepath.Join(certDir, "cert-chain.pem"),
				"private_key_file":    filepath.Join(certDir, "key.pem"),
				"ca_certificate_file": filepath.Join(certDir, "root-cert.pem"),
				"refresh_interval":    "900s",
			},
		}}
	}
	out, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// startCA runs pilotwire's CA in-process against cluster c (its root in
// istio-system) until the test ends and returns its address and root.
func startCA(t *testing.T, ctx context.Context, c *k8stest.Cluster, kube kubernetes.Interface) (string, []byte) {
	t.Helper()
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	cfg := ca.DefaultConfig()
	fs := pflag.NewFlagSet("ca", pflag.ContinueOnError)
	cfg.AddFlags(fs)
	if err := fs.Parse([]string{"--kubeconfig", c.Kubeconfig, "--grpc-addr", "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	s, err := ca.New(cfg, svc.Deps{
		Log:    slog.New(slog.NewTextHandler(pipelinetest.TestWriter{T: t}, nil)).With("component", "ca"),
		Reg:    prometheus.NewRegistry(),
		Health: &svc.Health{},
	})
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err, ok := testutil.Stopped(t, done, "the CA to stop"); ok && err != nil {
			t.Errorf("CA stopped with: %v", err)
		}
	})
	select {
	case <-s.Ready():
	case err := <-done:
		done <- err
		t.Fatalf("CA stopped before it was ready: %v", err)
	case <-ctx.Done():
		t.Fatal("CA not ready")
	}
	return s.GRPCAddr(), s.Authority().RootsPEM()
}

// xdsServer is grpc-go's xDS server with xDS credentials (plaintext
// fallback) on lis, bootstrapped with bootstrap, serving identityServer.
// It returns once the server serves.
func startXDSServer(t *testing.T, ctx context.Context, lis net.Listener, bootstrap []byte) {
	t.Helper()
	creds, err := xdscreds.NewServerCredentials(xdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	serving := make(chan struct{})
	var once sync.Once
	var lastErr atomic.Value
	srv, err := xds.NewGRPCServer(grpc.Creds(creds), xds.BootstrapContentsForTesting(bootstrap),
		xds.ServingModeCallback(func(_ net.Addr, args xds.ServingModeChangeArgs) {
			if args.Mode == connectivity.ServingModeServing {
				once.Do(func() { close(serving) })
			} else if args.Err != nil {
				lastErr.Store(args.Err.Error())
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	testgrpc.RegisterTestServiceServer(srv, identityServer{})
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	select {
	case <-serving:
	case <-ctx.Done():
		t.Fatalf("the xDS server never became serving (last: %v)", lastErr.Load())
	}
}

// xdsClient dials the echo-server through grpc-go's xDS resolver with
// bootstrap, with xDS credentials (plaintext fallback) or plaintext, until
// the test ends.
func xdsClient(t *testing.T, bootstrap []byte, withXDSCreds bool) testgrpc.TestServiceClient {
	t.Helper()
	c, close := dialXDS(t, bootstrap, withXDSCreds)
	t.Cleanup(close)
	return c
}

// dialXDS is xdsClient with a function that closes the channel.
func dialXDS(t *testing.T, bootstrap []byte, withXDSCreds bool) (testgrpc.TestServiceClient, func()) {
	t.Helper()
	resolver, err := xds.NewXDSResolverWithConfigForTesting(bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	creds := insecure.NewCredentials()
	if withXDSCreds {
		if creds, err = xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()}); err != nil {
			t.Fatal(err)
		}
	}
	cc, err := grpc.NewClient("xds:///echo-server.default.svc.cluster.local:8080", grpc.WithTransportCredentials(creds), grpc.WithResolvers(resolver))
	if err != nil {
		t.Fatal(err)
	}
	return testgrpc.NewTestServiceClient(cc), func() { cc.Close() }
}

// eventuallyCall polls call (each attempt bounded) until check accepts
// what it returned, and fails the test at ctx's deadline with the last.
func eventuallyCall(ctx context.Context, t *testing.T, what string, call func(context.Context) error, check func(error) bool) {
	t.Helper()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		last = call(cctx)
		cancel()
		if check(last) {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: never (last: %v)", what, last)
		case <-tick.C:
		}
	}
}

const (
	clientID = "spiffe://cluster.local/ns/default/sa/client"
	otherID  = "spiffe://cluster.local/ns/default/sa/other"
	serverID = "spiffe://cluster.local/ns/default/sa/server"
)

// TestGRPCXDSCredentials runs grpc-go's xDS server and clients with xDS
// credentials against pilotwire: certificates come from pilotwire's CA
// (ServiceAccount tokens from a real kube-apiserver, CSRs through Istio's
// CreateCertificate), files on disk read by the file_watcher certificate
// provider as Istio's bootstrap names it; the namespace is STRICT. A client
// labelled as using xDS credentials reaches the server over mTLS, each side
// seeing the other's SPIFFE identity; a plaintext client is refused, and
// so is a server whose identity is not the one a DestinationRule requires.
// Then AuthorizationPolicies on the server: a DENY on one method's path
// answers PERMISSION_DENIED there and OK on another, and an ALLOW by
// principal lets the client's service account in and refuses other's.
func TestGRPCXDSCredentials(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test against a real kube-apiserver")
	}
	cluster := k8stest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*testutil.DefaultTimeout)
	defer cancel()
	kube := kubeClient(t, cluster)
	caAddr, roots := startCA(t, ctx, cluster, kube)
	serverCerts := workloadCerts(t, ctx, kube, caAddr, roots, "server")
	clientCerts := workloadCerts(t, ctx, kube, caAddr, roots, "client")
	otherCerts := workloadCerts(t, ctx, kube, caAddr, roots, "other")

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pipelinetest.WriteFile(t, dir, "mesh.yaml", fmt.Sprintf(grpcMTLSMesh, lis.Addr().(*net.TCPAddr).Port))
	p := pipelinetest.Start(t, dir)

	startXDSServer(t, ctx, lis, grpcBootstrapFor(t, p.ADSAddr, "127.0.0.1", "echo-server-0", nil, serverCerts))

	xdsCredsLabels := map[string]string{"security.istio.io/tlsMode": "istio"}
	clientBootstrap := grpcBootstrapFor(t, p.ADSAddr, "127.0.0.2", "client-0", xdsCredsLabels, clientCerts)
	client := xdsClient(t, clientBootstrap, true)
	var resp *testgrpc.SimpleResponse
	var serverPeer peer.Peer
	eventuallyCall(ctx, t, "an mTLS call from client", func(ctx context.Context) (err error) {
		resp, err = client.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Peer(&serverPeer))
		return err
	}, func(err error) bool { return err == nil })
	if got := resp.GetUsername(); got != clientID {
		t.Errorf("server saw the caller as %q, want %q", got, clientID)
	}
	if got := tlsIdentity(serverPeer.AuthInfo); got != serverID {
		t.Errorf("client saw the server as %q, want %q", got, serverID)
	}

	// A client without xDS credentials (and without the label, so its
	// clusters carry no TLS) sends plaintext, which STRICT refuses.
	plain, closePlain := dialXDS(t, grpcBootstrapFor(t, p.ADSAddr, "127.0.0.3", "plain-0", nil, ""), false)
	for range 3 {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := plain.UnaryCall(cctx, &testgrpc.SimpleRequest{})
		ccancel()
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("plaintext call under STRICT: %v, want Unavailable", err)
		}
	}
	// Closed before the rule below, which it would reject: its bootstrap
	// has no certificate provider.
	closePlain()
	testutil.Eventually(t, "the plaintext client's ADS stream gone", func() bool {
		return p.Metric(t, "fe-0", "pilot_xds") == 2 // the server and client
	})

	// The client checks the server's identity: under a rule requiring
	// another one a new channel's handshake fails (grpc-go applies a new
	// security config to new connections only), and without the rule new
	// channels get through again.
	pipelinetest.WriteFile(t, dir, "rule.yaml", `apiVersion: networking.istio.io/v1
kind: DestinationRule
metadata: {name: echo-server, namespace: default}
spec:
  host: echo-server.default.svc.cluster.local
  trafficPolicy:
    tls: {mode: ISTIO_MUTUAL, subjectAltNames: [spiffe://cluster.local/ns/default/sa/nobody]}
`)
	freshCall := func(ctx context.Context) error {
		cc, close := dialXDS(t, clientBootstrap, true)
		defer close()
		_, err := cc.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		return err
	}
	eventuallyCall(ctx, t, "a server without the rule's identity refused", freshCall,
		func(err error) bool { return status.Code(err) == codes.Unavailable })
	if err := os.Remove(filepath.Join(dir, "rule.yaml")); err != nil {
		t.Fatal(err)
	}
	eventuallyCall(ctx, t, "calls back without the rule", freshCall, func(err error) bool { return err == nil })

	// Authorization on the server, by the mTLS identities: a DENY on
	// EmptyCall's path refuses it and lets UnaryCall through, for client
	// and other alike.
	other := xdsClient(t, grpcBootstrapFor(t, p.ADSAddr, "127.0.0.4", "other-0", xdsCredsLabels, otherCerts), true)
	pipelinetest.WriteFile(t, dir, "authz.yaml", `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: echo-server, namespace: default}
spec:
  selector: {matchLabels: {app: echo-server}}
  action: DENY
  rules:
  - to: [{operation: {paths: [/grpc.testing.TestService/EmptyCall]}}]
`)
	isCode := func(c codes.Code) func(error) bool { return func(err error) bool { return status.Code(err) == c } }
	emptyCall := func(c testgrpc.TestServiceClient) func(context.Context) error {
		return func(ctx context.Context) error {
			_, err := c.EmptyCall(ctx, &testgrpc.Empty{})
			return err
		}
	}
	unaryAs := func(c testgrpc.TestServiceClient, want string) func(context.Context) error {
		return func(ctx context.Context) error {
			resp, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
			if err == nil && resp.GetUsername() != want {
				return fmt.Errorf("server saw %q, want %q", resp.GetUsername(), want)
			}
			return err
		}
	}
	eventuallyCall(ctx, t, "DENY on EmptyCall refuses client", emptyCall(client), isCode(codes.PermissionDenied))
	eventuallyCall(ctx, t, "DENY on EmptyCall refuses other", emptyCall(other), isCode(codes.PermissionDenied))
	for _, c := range []struct {
		client testgrpc.TestServiceClient
		id     string
	}{{client, clientID}, {other, otherID}} {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		err := unaryAs(c.client, c.id)(cctx)
		ccancel()
		if err != nil {
			t.Errorf("UnaryCall as %s under a DENY on EmptyCall: %v", c.id, err)
		}
	}

	// An ALLOW for client's principal (replacing the DENY) lets client in,
	// EmptyCall included, and refuses other.
	pipelinetest.WriteFile(t, dir, "authz.yaml", `apiVersion: security.istio.io/v1
kind: AuthorizationPolicy
metadata: {name: echo-server, namespace: default}
spec:
  selector: {matchLabels: {app: echo-server}}
  action: ALLOW
  rules:
  - from: [{source: {principals: [cluster.local/ns/default/sa/client]}}]
`)
	eventuallyCall(ctx, t, "ALLOW for client refuses other", unaryAs(other, otherID), isCode(codes.PermissionDenied))
	eventuallyCall(ctx, t, "ALLOW for client lets EmptyCall in", emptyCall(client), func(err error) bool { return err == nil })
	for range 3 {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		errClient, errOther := unaryAs(client, clientID)(cctx), emptyCall(other)(cctx)
		ccancel()
		if errClient != nil {
			t.Errorf("UnaryCall as client under its ALLOW: %v", errClient)
		}
		if status.Code(errOther) != codes.PermissionDenied {
			t.Errorf("EmptyCall as other under client's ALLOW: %v, want PermissionDenied", errOther)
		}
	}

	if got := p.Metric(t, "fe-0", "pilot_total_xds_rejects"); got != 0 {
		t.Errorf("grpc clients rejected %v responses, want 0", got)
	}
}
