package ads

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
)

// testCA issues certificates for the TLS tests.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t testing.TB) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a leaf certificate; spiffe may be empty.
func (ca *testCA) issue(t testing.TB, serial int64, spiffe string, server bool) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "leaf"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature,
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	if spiffe != "" {
		u, _ := url.Parse(spiffe)
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kb, _ := x509.MarshalECPrivateKey(key)
	c, err := tls.X509KeyPair(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writePair(t testing.TB, dir string, c tls.Certificate) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	kb, _ := x509.MarshalECPrivateKey(c.PrivateKey.(*ecdsa.PrivateKey))
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// TestMutualTLSIdentity: with mutual TLS, a client whose SPIFFE namespace
// matches its node's namespace is served; another namespace, another trust
// domain or no certificate is refused.
func TestMutualTLSIdentity(t *testing.T) {
	ca := newCA(t)
	dir := t.TempDir()
	certFile, keyFile := writePair(t, dir, ca.issue(t, 2, "", true))
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	url := natstest.Start(t)
	f := runFrontend(t, url, "fe-tls", func(c *Config) {
		c.TLSCert, c.TLSKey, c.ClientCA, c.TrustDomain = certFile, keyFile, caFile, "cluster.local"
	})
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)

	tests := []struct {
		name   string
		spiffe string // "" with noCert: no client certificate at all
		noCert bool
		want   codes.Code
	}{
		{name: "matching namespace", spiffe: "spiffe://cluster.local/ns/default/sa/a", want: codes.OK},
		{name: "other namespace", spiffe: "spiffe://cluster.local/ns/other/sa/a", want: codes.PermissionDenied},
		{name: "other trust domain", spiffe: "spiffe://evil.example/ns/default/sa/a", want: codes.PermissionDenied},
		{name: "no SPIFFE id", spiffe: "", want: codes.Unauthenticated},
		{name: "no client certificate", noCert: true, want: codes.Unavailable},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
			defer cancel()
			tc2 := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
			if !tc.noCert {
				tc2.Certificates = []tls.Certificate{ca.issue(t, int64(10+i), tc.spiffe, false)}
			}
			cc, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(credentials.NewTLS(tc2)))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			s, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
			if err == nil {
				err = s.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, Node: &core.Node{Id: "sidecar~10.0.0.1~a-0.default~default.svc.cluster.local"}})
			}
			if err == nil {
				_, err = s.Recv()
			}
			if got := status.Code(err); got != tc.want {
				t.Errorf("stream ended with %v (%v), want %v", got, err, tc.want)
			}
		})
	}
}

// TestAdmissionLimit: beyond the admission burst, new streams get a clear
// ResourceExhausted while the admitted one keeps being served.
func TestAdmissionLimit(t *testing.T) {
	url := natstest.Start(t)
	f := runFrontend(t, url, "fe-limit", func(c *Config) { c.NewStreamRate, c.NewStreamBurst = 0.001, 1 })
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	first := dial(ctx, t, f.addr, sidecar())
	first.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
	first.recv()
	second := dial(ctx, t, f.addr, sidecar())
	// The server may refuse the stream before the request is sent: Send then
	// returns io.EOF, and Recv carries the status.
	_ = second.stream.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, Node: sidecar()})
	if _, err := second.stream.Recv(); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("second stream: %v, want ResourceExhausted", err)
	}
	first.send(&discovery.DiscoveryRequest{TypeUrl: resource.ListenerType})
	if r := first.recv(); r.GetTypeUrl() != resource.ListenerType {
		t.Fatalf("admitted stream got %s", r.GetTypeUrl())
	}
	if got := f.gauge("pilotwire_ads_streams_rejected_total"); got != 1 {
		t.Errorf("rejected streams = %v, want 1", got)
	}
}
