package ads_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/klauspost/compress/s2"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/pilotwire/pilotwire/internal/testkit/k8stest"
	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/services/ads"
	"github.com/pilotwire/pilotwire/services/ingest"
)

// leakCA issues the certificates of the leak test.
type leakCA struct {
	cert   *x509.Certificate
	key    *ecdsa.PrivateKey
	pem    []byte
	serial int64
}

func newLeakCA(t *testing.T) *leakCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "leak test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &leakCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), serial: 1}
}

// issue returns a leaf's certificate, its key in PEM, and the key's DER.
func (ca *leakCA) issue(t *testing.T, spiffe string, server bool) (certPEM, keyPEM, keyDER []byte) {
	t.Helper()
	ca.serial++
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(ca.serial), Subject: pkix.Name{CommonName: "leaf"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}
	if server {
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	if spiffe != "" {
		u, _ := url.Parse(spiffe)
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err = x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), keyDER
}

// syncBuffer collects the services' log lines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) Bytes() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return bytes.Clone(s.b.Bytes())
}

// leakScanner knows the forms a private key could take in a message or
// a log line.
type leakScanner struct {
	needles map[string][]byte // what → bytes that must not appear
}

func (l *leakScanner) addKey(name string, keyPEM, keyDER []byte) {
	l.needles[name+" (PEM)"] = keyPEM
	l.needles[name+" (DER)"] = keyDER
	// base64 of the key wherever it sits in what was encoded: for each of
	// the three alignments, the encoding of the key from that byte on,
	// without its last group (which depends on what follows).
	for what, b := range map[string][]byte{"PEM": keyPEM, "DER": keyDER} {
		for i := range 3 {
			enc := base64.StdEncoding.EncodeToString(b[i:])
			l.needles[fmt.Sprintf("%s (%s, base64 at alignment %d)", name, what, i)] = []byte(enc[:len(enc)-4])
		}
	}
	// The body of the PEM block is base64 of the DER in lines; the first
	// line alone is enough to tell.
	body := strings.Split(string(keyPEM), "\n")[1]
	l.needles[name+" (PEM's first base64 line)"] = []byte(body)
}

// scan reports every needle found in data.
func (l *leakScanner) scan(t *testing.T, where string, data []byte) {
	t.Helper()
	if bytes.Contains(data, []byte("PRIVATE KEY")) {
		t.Errorf("%s holds \"PRIVATE KEY\"", where)
	}
	for what, n := range l.needles {
		if bytes.Contains(data, n) {
			t.Errorf("%s holds %s", where, what)
		}
	}
	// A compressed message (snapshots are S2): scan it decompressed too.
	if d, err := io.ReadAll(io.LimitReader(s2.NewReader(bytes.NewReader(data)), 256<<20)); err == nil && len(d) > 0 {
		l.scan(t, where+" (S2-decoded)", d)
	}
}

// TestSDSNoPrivateKeyInStreamsOrLogs runs the whole pipeline against a
// real kube-apiserver holding TLS Secrets (kubernetes.io/tls, an Opaque
// one with cert/key, one applied by kubectl, whose annotation repeats
// the data), has a gateway fetch and re-fetch its credential over SDS
// (so the keys pass through the frontend and its delivery records), then
// reads every message of every JetStream stream (the change history,
// PushRequests, push orders' deliveries, KV buckets and object stores,
// whose streams they are) and every log line of the four services: none
// holds "PRIVATE KEY" or any key's bytes, raw or base64.
func TestSDSNoPrivateKeyInStreamsOrLogs(t *testing.T) {
	cl := k8stest.Start(t)
	kube := kubernetes.NewForConfigOrDie(cl.Config)
	ctx, cancel := context.WithTimeout(context.Background(), 2*testutil.DefaultTimeout)
	defer cancel()

	ca := newLeakCA(t)
	scanner := &leakScanner{needles: map[string][]byte{}}
	mustCreate := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}}, metav1.CreateOptions{})
	mustCreate(err)
	_, err = kube.RbacV1().Roles("istio-system").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "gateway-secrets"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "watch", "list"}}},
	}, metav1.CreateOptions{})
	mustCreate(err)
	_, err = kube.RbacV1().RoleBindings("istio-system").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "gateway-secrets"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "gateway-secrets"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "istio-ingressgateway", Namespace: "istio-system"}},
	}, metav1.CreateOptions{})
	mustCreate(err)

	secret := func(name string, typ corev1.SecretType, data map[string][]byte, annotations map[string]string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "istio-system", Annotations: annotations}, Type: typ, Data: data}
	}
	// Present before the pipeline starts (ingest's first list).
	myCert, myKey, myDER := ca.issue(t, "", true)
	scanner.addKey("my-cred's key", myKey, myDER)
	_, err = kube.CoreV1().Secrets("istio-system").Create(ctx, secret("my-cred", corev1.SecretTypeTLS,
		map[string][]byte{"tls.crt": myCert, "tls.key": myKey, "ca.crt": ca.pem}, nil), metav1.CreateOptions{})
	mustCreate(err)
	opCert, opKey, opDER := ca.issue(t, "", true)
	scanner.addKey("opaque-cred's key", opKey, opDER)
	_, err = kube.CoreV1().Secrets("istio-system").Create(ctx, secret("opaque-cred", corev1.SecretTypeOpaque,
		map[string][]byte{"cert": opCert, "key": opKey, "cacert": ca.pem}, nil), metav1.CreateOptions{})
	mustCreate(err)
	kcCert, kcKey, kcDER := ca.issue(t, "", true)
	scanner.addKey("applied-cred's key", kcKey, kcDER)
	lastApplied := `{"apiVersion":"v1","kind":"Secret","type":"kubernetes.io/tls","metadata":{"name":"applied-cred","namespace":"istio-system"},"data":{"tls.crt":"` +
		base64.StdEncoding.EncodeToString(kcCert) + `","tls.key":"` + base64.StdEncoding.EncodeToString(kcKey) + `"}}`
	_, err = kube.CoreV1().Secrets("istio-system").Create(ctx, secret("applied-cred", corev1.SecretTypeTLS,
		map[string][]byte{"tls.crt": kcCert, "tls.key": kcKey}, map[string]string{"kubectl.kubernetes.io/last-applied-configuration": lastApplied}), metav1.CreateOptions{})
	mustCreate(err)

	// The frontend's TLS: a server certificate and the client CA.
	dir := t.TempDir()
	srvCert, srvKey, _ := ca.issue(t, "", true)
	for name, b := range map[string][]byte{"tls.crt": srvCert, "tls.key": srvKey, "ca.pem": ca.pem} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cfgDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(cfgDir, "gateway.yaml"), []byte(`apiVersion: networking.istio.io/v1
kind: Gateway
metadata: {name: ingress, namespace: istio-system}
spec:
  selector: {istio: ingressgateway}
  servers:
  - port: {number: 443, name: https, protocol: HTTPS}
    hosts: ["shop.example.com"]
    tls: {mode: MUTUAL, credentialName: my-cred}
`), 0o644); err != nil {
		t.Fatal(err)
	}

	logs := &syncBuffer{}
	p := pipelinetest.Start(t, cfgDir, pipelinetest.Options{
		Logs: logs,
		Ingest: func(c *ingest.Config) {
			c.Kubeconfig = cl.Kubeconfig
			c.FileClusterID = "files"
		},
		ADS: func(c *ads.Config) {
			c.TLSCert, c.TLSKey, c.ClientCA, c.TrustDomain = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"), filepath.Join(dir, "ca.pem"), "cluster.local"
			c.Kubeconfig = cl.Kubeconfig
		},
	})

	// A gateway takes its listeners and credentials over mutual TLS.
	gwCert, gwKey, gwDER := ca.issue(t, "spiffe://cluster.local/ns/istio-system/sa/istio-ingressgateway", false)
	scanner.addKey("the gateway's own key", gwKey, gwDER)
	pair, err := tls.X509KeyPair(gwCert, gwKey)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	cc, err := grpc.NewClient(p.ADSAddr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	md, _ := structpb.NewStruct(map[string]any{"NAMESPACE": "istio-system", "LABELS": map[string]any{"istio": "ingressgateway"}})
	node := &core.Node{Id: "router~10.0.0.5~ingress-0.istio-system~istio-system.svc.cluster.local", Metadata: md}
	names := []string{"kubernetes://my-cred", "kubernetes://my-cred-cacert", "kubernetes://opaque-cred", "kubernetes://applied-cred", "kubernetes://missing-cred"}
	send := func(r *discovery.DiscoveryRequest) {
		t.Helper()
		r.Node = node
		if err := stream.Send(r); err != nil {
			t.Fatal(err)
		}
	}
	recvSecrets := func() (*discovery.DiscoveryResponse, map[string]*tlsv3.Secret) {
		t.Helper()
		for {
			r, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if r.GetTypeUrl() != resource.SecretType {
				send(&discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
				continue
			}
			out := map[string]*tlsv3.Secret{}
			for _, a := range r.GetResources() {
				var s tlsv3.Secret
				if err := a.UnmarshalTo(&s); err != nil {
					t.Fatal(err)
				}
				out[s.GetName()] = &s
			}
			return r, out
		}
	}
	send(&discovery.DiscoveryRequest{TypeUrl: resource.ListenerType})
	send(&discovery.DiscoveryRequest{TypeUrl: resource.SecretType, ResourceNames: names})
	r, got := recvSecrets()
	if len(got) != 4 || !bytes.Equal(got["kubernetes://my-cred"].GetTlsCertificate().GetPrivateKey().GetInlineBytes(), myKey) ||
		!bytes.Equal(got["kubernetes://opaque-cred"].GetTlsCertificate().GetPrivateKey().GetInlineBytes(), opKey) {
		t.Fatalf("the gateway got %d secrets, want my-cred, its CA, opaque-cred and applied-cred with their keys", len(got))
	}
	send(&discovery.DiscoveryRequest{TypeUrl: resource.SecretType, ResourceNames: names, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})

	// A rotation, and a Secret created while the pipeline runs (ingest's
	// watch): both reach the gateway, neither any stream.
	newCert, newKey, newDER := ca.issue(t, "", true)
	scanner.addKey("my-cred's rotated key", newKey, newDER)
	_, err = kube.CoreV1().Secrets("istio-system").Update(ctx, secret("my-cred", corev1.SecretTypeTLS,
		map[string][]byte{"tls.crt": newCert, "tls.key": newKey, "ca.crt": ca.pem}, nil), metav1.UpdateOptions{})
	mustCreate(err)
	r, got = recvSecrets()
	if !bytes.Equal(got["kubernetes://my-cred"].GetTlsCertificate().GetPrivateKey().GetInlineBytes(), newKey) {
		t.Fatalf("after the rotation the gateway got %d secrets, not my-cred's new key", len(got))
	}
	send(&discovery.DiscoveryRequest{TypeUrl: resource.SecretType, ResourceNames: names, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
	lateCert, lateKey, lateDER := ca.issue(t, "", true)
	scanner.addKey("missing-cred's key", lateKey, lateDER)
	_, err = kube.CoreV1().Secrets("istio-system").Create(ctx, secret("missing-cred", corev1.SecretTypeTLS,
		map[string][]byte{"tls.crt": lateCert, "tls.key": lateKey}, nil), metav1.CreateOptions{})
	mustCreate(err)
	r, got = recvSecrets()
	if !bytes.Equal(got["kubernetes://missing-cred"].GetTlsCertificate().GetPrivateKey().GetInlineBytes(), lateKey) {
		t.Fatalf("the Secret created later did not reach the gateway")
	}
	send(&discovery.DiscoveryRequest{TypeUrl: resource.SecretType, ResourceNames: names, VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})

	// The deliveries of the secrets (names and versions) are on the
	// stream: what is scanned below is where a leak would be.
	_, js := natstest.Connect(t, p.URL)
	p.WaitFor(t, "the secrets' delivery records and ACKs", func() bool {
		return bytes.Count(streamBytes(ctx, t, js, "PW_DELIVERIES"), []byte(resource.SecretType)) >= 6
	})
	// ingest is live on the cluster: a Service made after every Secret
	// is recorded (the Secrets are not, whether listed or watched).
	_, err = kube.CoreV1().Services("istio-system").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "after-the-secrets", Namespace: "istio-system"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}, metav1.CreateOptions{})
	mustCreate(err)
	p.WaitFor(t, "ingest records the Service made after the Secrets", func() bool {
		return bytes.Contains(streamBytes(ctx, t, js, "PW_CHANGES"), []byte("after-the-secrets"))
	})

	streams := 0
	for name := range js.StreamNames(ctx).Name() {
		streams++
		scanner.scan(t, "stream "+name, streamBytes(ctx, t, js, name))
	}
	if streams < 4 {
		t.Fatalf("scanned %d streams, want at least PW_CHANGES, PW_PUSHES, PW_DELIVERIES and the registry", streams)
	}
	for name := range js.ObjectStoreNames(ctx).Name() {
		os, err := js.ObjectStore(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := os.List(ctx)
		if err != nil && !errors.Is(err, jetstream.ErrNoObjectsFound) {
			t.Fatal(err)
		}
		for _, o := range objs {
			b, err := os.GetBytes(ctx, o.Name)
			if err != nil {
				t.Fatal(err)
			}
			scanner.scan(t, "object "+name+"/"+o.Name, b)
		}
	}
	lines := logs.Bytes()
	if !bytes.Contains(lines, []byte("component=fe-0")) || !bytes.Contains(lines, []byte("component=ingest")) {
		t.Fatalf("the services' logs were not captured (%d bytes)", len(lines))
	}
	scanner.scan(t, "the services' logs", lines)
}

// streamBytes is every message of a stream (subject, headers and data),
// concatenated.
func streamBytes(ctx context.Context, t *testing.T, js jetstream.JetStream, name string) []byte {
	t.Helper()
	st, err := js.Stream(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // deleted or purged
		}
		if err != nil {
			t.Fatalf("stream %s message %d: %v", name, seq, err)
		}
		out.WriteString(m.Subject + "\n")
		for k, vs := range m.Header {
			out.WriteString(k + ": " + strings.Join(vs, ",") + "\n")
		}
		out.Write(m.Data)
		out.WriteByte('\n')
	}
	return out.Bytes()
}
