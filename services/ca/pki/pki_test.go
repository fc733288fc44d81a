package pki_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/pilotwire/pilotwire/services/ca/pki"
)

const spiffeID = "spiffe://cluster.local/ns/default/sa/client"

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func fixedClock() time.Time { return epoch }

// newRoot makes a self-signed authority at epoch.
func newRoot(t *testing.T, opts pki.Options) (*pki.Authority, []byte, []byte) {
	t.Helper()
	certPEM, keyPEM, err := pki.SelfSignedRoot("cluster.local", pki.DefaultRootTTL, pki.DefaultRootRSABits, epoch)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Now == nil {
		opts.Now = fixedClock
	}
	a, err := pki.New(certPEM, keyPEM, nil, certPEM, opts)
	if err != nil {
		t.Fatal(err)
	}
	return a, certPEM, keyPEM
}

// csrFor makes a CSR, signed by a fresh key, that claims names the CA must
// ignore.
func csrFor(t *testing.T) ([]byte, crypto.Signer) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	evil, _ := url.Parse("spiffe://cluster.local/ns/kube-system/sa/admin")
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		Subject:  pkix.Name{Organization: []string{"evil"}},
		DNSNames: []string{"kubernetes.default.svc"},
		URIs:     []*url.URL{evil},
	}, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), key
}

func parse(t *testing.T, certPEM []byte) *x509.Certificate {
	t.Helper()
	certs, err := pki.ParseCertificates(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	return certs[0]
}

func TestSelfSignedRootIsIstios(t *testing.T) {
	_, certPEM, keyPEM := newRoot(t, pki.Options{})
	root := parse(t, certPEM)
	if !root.IsCA || root.KeyUsage != x509.KeyUsageCertSign || root.Subject.String() != "O=cluster.local" {
		t.Errorf("root: CA %v, key usage %v, subject %q; want a CA, cert sign only, O=cluster.local", root.IsCA, root.KeyUsage, root.Subject)
	}
	if got := root.NotAfter.Sub(root.NotBefore); got != pki.DefaultRootTTL {
		t.Errorf("root lifetime %v, want %v", got, pki.DefaultRootTTL)
	}
	if !strings.HasPrefix(string(keyPEM), "-----BEGIN RSA PRIVATE KEY-----") {
		t.Errorf("root key is not PKCS#1 RSA")
	}
}

// TestSignNamesOnlyTheCaller: the certificate holds the CSR's key and the
// identity given, none of the CSR's claims, with Istio's usages.
func TestSignNamesOnlyTheCaller(t *testing.T) {
	a, rootPEM, _ := newRoot(t, pki.Options{})
	csrPEM, key := csrFor(t)
	certPEM, err := a.Sign(csrPEM, []string{spiffeID}, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := parse(t, certPEM)
	var uris []string
	for _, u := range c.URIs {
		uris = append(uris, u.String())
	}
	if diff := cmp.Diff([]string{spiffeID}, uris); diff != "" {
		t.Errorf("URI SANs (-want +got):\n%s", diff)
	}
	if len(c.DNSNames) != 0 || c.Subject.String() != "" || c.IsCA {
		t.Errorf("certificate carries DNS %v, subject %q, CA %v; want none of the CSR's claims", c.DNSNames, c.Subject, c.IsCA)
	}
	if !c.PublicKey.(*ecdsa.PublicKey).Equal(key.Public()) {
		t.Error("certificate is not for the CSR's key")
	}
	if c.KeyUsage != x509.KeyUsageDigitalSignature|x509.KeyUsageKeyEncipherment {
		t.Errorf("key usage %v", c.KeyUsage)
	}
	if diff := cmp.Diff([]x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, c.ExtKeyUsage); diff != "" {
		t.Errorf("extended key usage (-want +got):\n%s", diff)
	}
	for _, ext := range c.Extensions {
		if ext.Id.Equal([]int{2, 5, 29, 17}) && !ext.Critical {
			t.Error("SAN extension of a subjectless certificate is not critical")
		}
	}
	if !c.NotBefore.Equal(epoch.Add(-pki.ClockSkew)) || !c.NotAfter.Equal(epoch.Add(pki.DefaultWorkloadCertTTL)) {
		t.Errorf("validity %v to %v, want %v to %v", c.NotBefore, c.NotAfter, epoch.Add(-pki.ClockSkew), epoch.Add(pki.DefaultWorkloadCertTTL))
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rootPEM)
	if _, err := c.Verify(x509.VerifyOptions{Roots: roots, CurrentTime: epoch, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("does not verify to the root: %v", err)
	}
	if diff := cmp.Diff([]string{string(certPEM), string(rootPEM)}, a.CertChain(certPEM)); diff != "" {
		t.Errorf("cert chain of a self-signed CA (-want +got):\n%s", diff)
	}
}

func TestSignTTL(t *testing.T) {
	a, _, _ := newRoot(t, pki.Options{DefaultTTL: time.Hour, MaxTTL: 48 * time.Hour})
	csrPEM, _ := csrFor(t)
	for _, tc := range []struct {
		name     string
		ttl      time.Duration
		want     time.Duration
		wantKind string
	}{
		{name: "default", ttl: 0, want: time.Hour},
		{name: "negative takes the default", ttl: -time.Second, want: time.Hour},
		{name: "asked", ttl: 3 * time.Hour, want: 3 * time.Hour},
		{name: "the max", ttl: 48 * time.Hour, want: 48 * time.Hour},
		{name: "over the max is refused", ttl: 49 * time.Hour, wantKind: pki.KindTTL},
	} {
		t.Run(tc.name, func(t *testing.T) {
			certPEM, err := a.Sign(csrPEM, []string{spiffeID}, tc.ttl)
			if tc.wantKind != "" {
				var se *pki.SignError
				if !errors.As(err, &se) || se.Kind != tc.wantKind {
					t.Fatalf("Sign = %v, want a %s", err, tc.wantKind)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := parse(t, certPEM).NotAfter.Sub(epoch); got != tc.want {
				t.Errorf("lifetime %v, want %v", got, tc.want)
			}
		})
	}
}

func TestSignNeverOutlivesTheCA(t *testing.T) {
	certPEM, keyPEM, err := pki.SelfSignedRoot("cluster.local", 2*time.Hour, pki.DefaultRootRSABits, epoch)
	if err != nil {
		t.Fatal(err)
	}
	a, err := pki.New(certPEM, keyPEM, nil, certPEM, pki.Options{Now: fixedClock})
	if err != nil {
		t.Fatal(err)
	}
	csrPEM, _ := csrFor(t)
	leaf, err := a.Sign(csrPEM, []string{spiffeID}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := parse(t, leaf).NotAfter; !got.Equal(epoch.Add(2 * time.Hour)) {
		t.Errorf("leaf expires %v, want the CA's expiry %v", got, epoch.Add(2*time.Hour))
	}
}

func TestSignRejectsBadCSRs(t *testing.T) {
	a, _, _ := newRoot(t, pki.Options{})
	good, _ := csrFor(t)
	block, _ := pem.Decode(good)
	tampered := append([]byte(nil), block.Bytes...)
	tampered[len(tampered)-1] ^= 0xff // the signature's last byte
	for _, tc := range []struct {
		name string
		csr  []byte
	}{
		{name: "empty", csr: nil},
		{name: "not PEM", csr: []byte("hello")},
		{name: "a certificate", csr: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: block.Bytes})},
		{name: "bad signature", csr: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: tampered})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := a.Sign(tc.csr, []string{spiffeID}, 0)
			var se *pki.SignError
			if !errors.As(err, &se) || se.Kind != pki.KindCSR {
				t.Errorf("Sign = %v, want a %s", err, pki.KindCSR)
			}
		})
	}
}

// TestIntermediateCA: a plug-in CA (an intermediate under a root), as in
// Istio's cacerts; the response chain is the leaf, the chain, the root.
func TestIntermediateCA(t *testing.T) {
	_, rootPEM, rootKeyPEM := newRoot(t, pki.Options{})
	rootCert := parse(t, rootPEM)
	rootKey, err := pki.ParsePrivateKey(rootKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	interKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: bigOne(), Subject: pkix.Name{CommonName: "intermediate"},
		NotBefore: epoch.Add(-time.Hour), NotAfter: epoch.Add(365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}, rootCert, interKey.Public(), rootKey)
	if err != nil {
		t.Fatal(err)
	}
	interPEM := pki.EncodeCertificate(der)
	interKeyDER, err := x509.MarshalECPrivateKey(interKey)
	if err != nil {
		t.Fatal(err)
	}
	interKeyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: interKeyDER})

	// Istio's cert-chain.pem: the CA certificate, then the root.
	chainPEM := append(append([]byte(nil), interPEM...), rootPEM...)
	a, err := pki.New(interPEM, interKeyPEM, chainPEM, rootPEM, pki.Options{Now: fixedClock})
	if err != nil {
		t.Fatal(err)
	}
	csrPEM, _ := csrFor(t)
	leaf, err := a.Sign(csrPEM, []string{spiffeID}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{string(leaf), string(interPEM), string(rootPEM), string(rootPEM)}, a.CertChain(leaf)); diff != "" {
		t.Errorf("cert chain (-want +got):\n%s", diff)
	}

	// Without cert-chain.pem the intermediate still goes with the leaf.
	b, err := pki.New(interPEM, interKeyPEM, nil, rootPEM, pki.Options{Now: fixedClock})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.CertChain(leaf); len(got) != 3 || got[1] != string(interPEM) {
		t.Errorf("cert chain without cert-chain.pem = %q, want leaf, intermediate, root", got)
	}

	// A CA that does not chain to the roots given is refused.
	_, otherRoot, _ := newRoot(t, pki.Options{})
	if _, err := pki.New(interPEM, interKeyPEM, nil, otherRoot, pki.Options{Now: fixedClock}); err == nil {
		t.Error("New accepted an intermediate that does not chain to the roots")
	}
}

func TestNewRejectsBadMaterial(t *testing.T) {
	_, certPEM, keyPEM := newRoot(t, pki.Options{})
	_, _, otherKey := newRoot(t, pki.Options{})
	for _, tc := range []struct {
		name            string
		cert, key, root []byte
		now             time.Time
	}{
		{name: "key of another certificate", cert: certPEM, key: otherKey, root: certPEM, now: epoch},
		{name: "no key", cert: certPEM, root: certPEM, now: epoch},
		{name: "no certificate", key: keyPEM, root: certPEM, now: epoch},
		{name: "expired", cert: certPEM, key: keyPEM, root: certPEM, now: epoch.Add(pki.DefaultRootTTL + time.Hour)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pki.New(tc.cert, tc.key, nil, tc.root, pki.Options{Now: func() time.Time { return tc.now }})
			if err == nil {
				t.Fatal("New succeeded")
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") || strings.Contains(err.Error(), string(keyPEM[40:80])) {
				t.Errorf("error quotes the key: %v", err)
			}
		})
	}
}

// TestAuthorityNeverPrintsItsKey: whatever way the authority is formatted
// or logged, its key stays out.
func TestAuthorityNeverPrintsItsKey(t *testing.T) {
	a, _, _ := newRoot(t, pki.Options{})
	var logged strings.Builder
	slog.New(slog.NewTextHandler(&logged, nil)).Info("ca", "authority", a)
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("ca", "authority", a)
	for _, s := range []string{fmt.Sprint(a), fmt.Sprintf("%+v", a), fmt.Sprintf("%#v", a), logged.String()} {
		if strings.Contains(s, "PRIVATE") || strings.Contains(s, "PrivateKey") || strings.Contains(s, "D:") {
			t.Errorf("formatted authority shows key material: %s", s)
		}
		if !strings.Contains(s, "cluster.local") {
			t.Errorf("formatted authority does not name the CA: %s", s)
		}
	}
}

func TestIssueServing(t *testing.T) {
	a, rootPEM, _ := newRoot(t, pki.Options{Now: time.Now})
	names := []string{"istiod.istio-system.svc", "pilotwire-ca.istio-system.svc"}
	cert, err := a.IssueServing(names, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(rootPEM)
	for _, n := range names {
		if _, err := cert.Leaf.Verify(x509.VerifyOptions{DNSName: n, Roots: roots}); err != nil {
			t.Errorf("serving certificate for %s: %v", n, err)
		}
	}
	if len(cert.Leaf.URIs) != 0 {
		t.Errorf("serving certificate has URI SANs %v: it must not pass as a workload", cert.Leaf.URIs)
	}
}

func bigOne() *big.Int { return big.NewInt(1) }
