package ca_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/pilotwire/pilotwire/internal/testkit/k8stest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ca"
	"github.com/pilotwire/pilotwire/services/ca/pki"
)

// TestRootStorage: where the CA's root comes from and how it is kept, on
// one real kube-apiserver. The subtests run in order, one CA at a time
// (each publishes its root into every namespace), each keeping its
// Secrets in a namespace of its own.
func TestRootStorage(t *testing.T) {
	c := k8stest.Start(t)
	cs := kubernetes.NewForConfigOrDie(c.Config)
	ctx := testContext(t)
	createNamespace(t, ctx, cs, "app")
	never := &secrets{}

	t.Run("layout and trust domain", func(t *testing.T) {
		createNamespace(t, ctx, cs, "td-system")
		r := runCA(t, c, "td-system", never, "--trust-domain", "example.org")
		s, err := cs.CoreV1().Secrets("td-system").Get(ctx, ca.SelfSignedSecret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Type != "istio.io/ca-root" {
			t.Errorf("secret type %q, want istio.io/ca-root", s.Type)
		}
		for _, k := range []string{"ca-cert.pem", "ca-key.pem", "root-cert.pem", "cert-chain.pem", "key.pem"} {
			if _, ok := s.Data[k]; !ok {
				t.Errorf("secret lacks %s", k)
			}
		}
		root := r.svc.Authority().RootsPEM()
		if !bytes.Equal(s.Data["ca-cert.pem"], root) || !bytes.Equal(s.Data["root-cert.pem"], root) {
			t.Error("ca-cert.pem and root-cert.pem are not the root in use")
		}
		if !strings.HasPrefix(string(s.Data["ca-key.pem"]), "-----BEGIN RSA PRIVATE KEY-----") {
			t.Error("ca-key.pem is not a PKCS#1 RSA key")
		}
		if got := r.svc.Authority().Certificate().Subject.Organization; len(got) != 1 || got[0] != "example.org" {
			t.Errorf("root organization %v, want the trust domain", got)
		}
		client := dial(t, r.svc.GRPCAddr(), publishedRoot(t, ctx, cs, "app", root), ca.IstiodDNSName, nil)
		csrPEM, _ := newCSR(t)
		resp, err := createCertificate(ctx, client, csrPEM, serviceAccountToken(t, ctx, cs, "app", "reviews", never, "istio-ca"), 0)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{"spiffe://example.org/ns/app/sa/reviews"}, uriSANs(checkChain(t, resp.CertChain, root))); diff != "" {
			t.Errorf("URI SANs (-want +got):\n%s", diff)
		}
	})

	t.Run("restart keeps the root", func(t *testing.T) {
		createNamespace(t, ctx, cs, "istio-system")
		first := runCA(t, c, "istio-system", never)
		root := first.svc.Authority().RootsPEM()
		// A workload's certificate from before the restart.
		csrPEM, key := newCSR(t)
		resp, err := createCertificate(ctx, dial(t, first.svc.GRPCAddr(), publishedRoot(t, ctx, cs, "app", root), ca.IstiodDNSName, nil),
			csrPEM, serviceAccountToken(t, ctx, cs, "app", "reviews", never, "istio-ca"), 0)
		if err != nil {
			t.Fatal(err)
		}
		old := checkChain(t, resp.CertChain, root)
		before, err := cs.CoreV1().Secrets("istio-system").Get(ctx, ca.SelfSignedSecret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		first.stop()

		second := runCA(t, c, "istio-system", never)
		if !bytes.Equal(second.svc.Authority().RootsPEM(), root) {
			t.Error("the restarted CA has another root")
		}
		after, err := cs.CoreV1().Secrets("istio-system").Get(ctx, ca.SelfSignedSecret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if after.ResourceVersion != before.ResourceVersion {
			t.Errorf("istio-ca-secret rewritten on restart (resourceVersion %s -> %s)", before.ResourceVersion, after.ResourceVersion)
		}
		// The certificate from before the restart still authenticates.
		client := dial(t, second.svc.GRPCAddr(), publishedRoot(t, ctx, cs, "app", root), ca.IstiodDNSName,
			&tls.Certificate{Certificate: [][]byte{old.Raw}, PrivateKey: key})
		if _, err := createCertificate(ctx, client, csrPEM, "", 0); err != nil {
			t.Errorf("CreateCertificate after restart with a certificate from before: %v", err)
		}
	})

	t.Run("replicas share one root", func(t *testing.T) {
		createNamespace(t, ctx, cs, "race-system")
		a := startCA(t, c, "race-system", never)
		b := startCA(t, c, "race-system", never)
		a.waitReady(t)
		b.waitReady(t)
		if !bytes.Equal(a.svc.Authority().RootsPEM(), b.svc.Authority().RootsPEM()) {
			t.Error("two replicas started together have different roots")
		}
		s, err := cs.CoreV1().Secrets("race-system").Get(ctx, ca.SelfSignedSecret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(s.Data["ca-cert.pem"], a.svc.Authority().RootsPEM()) {
			t.Error("the replicas' root is not the stored one")
		}
		for name, r := range map[string]*runningCA{"a": a, "b": b} {
			if strings.Contains(r.logs.String(), "another replica stored the root first") {
				t.Logf("replica %s lost the create race and took the winner's root", name)
			}
		}
	})

	t.Run("plug-in CA from cacerts", func(t *testing.T) {
		createNamespace(t, ctx, cs, "plugin-system")
		// A self-signed root first: cacerts, added later, takes precedence.
		runCA(t, c, "plugin-system", never).stop()
		rootPEM, interPEM, interKeyPEM := pluginCA(t)
		chainPEM := append(append([]byte(nil), interPEM...), rootPEM...)
		_, err := cs.CoreV1().Secrets("plugin-system").Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: ca.PluginSecret},
			Data: map[string][]byte{
				"ca-cert.pem": interPEM, "ca-key.pem": interKeyPEM, "root-cert.pem": rootPEM, "cert-chain.pem": chainPEM,
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		r := runCA(t, c, "plugin-system", never)
		if !bytes.Equal(r.svc.Authority().RootsPEM(), rootPEM) {
			t.Fatal("the CA does not use the plug-in root")
		}
		roots := publishedRoot(t, ctx, cs, "app", rootPEM)
		client := dial(t, r.svc.GRPCAddr(), roots, ca.IstiodDNSName, nil)
		csrPEM, _ := newCSR(t)
		resp, err := createCertificate(ctx, client, csrPEM, serviceAccountToken(t, ctx, cs, "app", "reviews", never, "istio-ca"), 0)
		if err != nil {
			t.Fatal(err)
		}
		// Istio's order: the leaf, cert-chain.pem split, root-cert.pem last.
		if diff := cmp.Diff([]string{string(interPEM), string(rootPEM), string(rootPEM)}, resp.CertChain[1:]); diff != "" {
			t.Errorf("chain after the leaf (-want +got):\n%s", diff)
		}
		leaf := checkChain(t, resp.CertChain, rootPEM)
		if diff := cmp.Diff([]string{"spiffe://cluster.local/ns/app/sa/reviews"}, uriSANs(leaf)); diff != "" {
			t.Errorf("URI SANs (-want +got):\n%s", diff)
		}
		if got := testutil.Metric(r.reg, "citadel_server_cert_chain_expiry_seconds"); got <= 0 {
			t.Errorf("citadel_server_cert_chain_expiry_seconds = %v, want the plug-in CA's remaining life", got)
		}
	})

	t.Run("incomplete cacerts is an error", func(t *testing.T) {
		createNamespace(t, ctx, cs, "broken-system")
		rootPEM, _, _ := pluginCA(t)
		_, err := cs.CoreV1().Secrets("broken-system").Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: ca.PluginSecret},
			Data:       map[string][]byte{"root-cert.pem": rootPEM},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cfg := ca.DefaultConfig()
		cfg.Kubeconfig, cfg.Namespace, cfg.GRPCAddr = c.Kubeconfig, "broken-system", "127.0.0.1:0"
		s, err := ca.New(cfg, svc.Deps{Log: slog.New(slog.DiscardHandler), Reg: prometheus.NewRegistry(), Health: &svc.Health{}})
		if err != nil {
			t.Fatal(err)
		}
		runCtx, cancel := context.WithTimeout(ctx, testutil.DefaultTimeout)
		defer cancel()
		err = s.Run(runCtx)
		if err == nil || !strings.Contains(err.Error(), "incomplete") || runCtx.Err() != nil {
			t.Errorf("Run with an incomplete cacerts = %v, want an immediate error saying it is incomplete", err)
		}
	})
}

// pluginCA makes what an operator puts in cacerts: a root, and an
// intermediate CA it signed, with the intermediate's key.
func pluginCA(t *testing.T) (rootPEM, interPEM, interKeyPEM []byte) {
	t.Helper()
	now := time.Now()
	rootPEM, rootKeyPEM, err := pki.SelfSignedRoot("plugin-root", 24*time.Hour, pki.DefaultRootRSABits, now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	roots, err := pki.ParseCertificates(rootPEM)
	if err != nil {
		t.Fatal(err)
	}
	rootKey, err := pki.ParsePrivateKey(rootKeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "plugin-intermediate"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(12 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}, roots[0], key.Public(), rootKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return rootPEM, pki.EncodeCertificate(der), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}
