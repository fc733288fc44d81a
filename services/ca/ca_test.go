package ca_test

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	pb "istio.io/api/security/v1alpha1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/pilotwire/pilotwire/internal/testkit/k8stest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/services/ca"
	"github.com/pilotwire/pilotwire/services/ca/pki"
)

// TestCA runs the CA against a real kube-apiserver and talks to it as
// istio-agent does: over TLS trusting only the root the CA published in
// the workload's namespace, with a service-account token (audience
// istio-ca) reviewed by the API server, then with the certificate it got.
// It checks the refusals, and that the root is published into every
// namespace and kept there.
func TestCA(t *testing.T) {
	c := k8stest.Start(t)
	cs := kubernetes.NewForConfigOrDie(c.Config)
	ctx := testContext(t)
	createNamespace(t, ctx, cs, "istio-system")
	createNamespace(t, ctx, cs, "app")
	never := &secrets{}
	r := runCA(t, c, "istio-system", never)
	roots := publishedRoot(t, ctx, cs, "app", r.svc.Authority().RootsPEM())
	client := dial(t, r.svc.GRPCAddr(), roots, ca.IstiodDNSName, nil)
	token := serviceAccountToken(t, ctx, cs, "app", "client", never, "istio-ca")

	var leafPEM []byte
	var leafKey tls.Certificate
	t.Run("token", func(t *testing.T) {
		csrPEM, key := newCSR(t)
		resp, err := createCertificate(ctx, client, csrPEM, token, 3600, "clusterid", "Kubernetes")
		if err != nil {
			t.Fatalf("CreateCertificate: %v", err)
		}
		if len(resp.CertChain) != 2 {
			t.Errorf("a self-signed CA's chain has %d elements, want 2 (leaf, root)", len(resp.CertChain))
		}
		leaf := checkChain(t, resp.CertChain, roots)
		if diff := cmp.Diff([]string{"spiffe://cluster.local/ns/app/sa/client"}, uriSANs(leaf)); diff != "" {
			t.Errorf("URI SANs (-want +got):\n%s", diff)
		}
		if len(leaf.DNSNames) != 0 {
			t.Errorf("leaf carries the CSR's DNS names %v", leaf.DNSNames)
		}
		if got := leaf.NotAfter.Sub(leaf.NotBefore); got != time.Hour+pki.ClockSkew {
			t.Errorf("leaf lifetime %v, want the hour asked (+%v backdating)", got, pki.ClockSkew)
		}
		leafPEM = []byte(resp.CertChain[0])
		leafKey = tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
	})

	t.Run("serving names", func(t *testing.T) {
		// The CA's own certificate names pilotwire-ca.<ns>.svc too.
		other := dial(t, r.svc.GRPCAddr(), roots, "pilotwire-ca.istio-system.svc", nil)
		csrPEM, _ := newCSR(t)
		if _, err := createCertificate(ctx, other, csrPEM, token, 0); err != nil {
			t.Errorf("CreateCertificate via pilotwire-ca.istio-system.svc: %v", err)
		}
		wrong := dial(t, r.svc.GRPCAddr(), roots, "evil.example.com", nil)
		if _, err := createCertificate(ctx, wrong, csrPEM, token, 0); status.Code(err) != codes.Unavailable {
			t.Errorf("CreateCertificate to a name the CA's certificate lacks = %v, want a TLS failure", err)
		}
	})

	t.Run("client certificate", func(t *testing.T) {
		if leafPEM == nil {
			t.Fatal("no certificate from the token subtest to authenticate with")
		}
		mtls := dial(t, r.svc.GRPCAddr(), roots, ca.IstiodDNSName, &leafKey)
		csrPEM, _ := newCSR(t)
		resp, err := createCertificate(ctx, mtls, csrPEM, "", 0)
		if err != nil {
			t.Fatalf("CreateCertificate with the CA's certificate and no token: %v", err)
		}
		leaf := checkChain(t, resp.CertChain, roots)
		if diff := cmp.Diff([]string{"spiffe://cluster.local/ns/app/sa/client"}, uriSANs(leaf)); diff != "" {
			t.Errorf("URI SANs (-want +got):\n%s", diff)
		}
		if got := leaf.NotAfter.Sub(leaf.NotBefore); got != pki.DefaultWorkloadCertTTL+pki.ClockSkew {
			t.Errorf("lifetime %v, want the default %v (+%v)", got, pki.DefaultWorkloadCertTTL, pki.ClockSkew)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		otherAudience := serviceAccountToken(t, ctx, cs, "app", "client", never, "other")
		before := testutil.Metric(r.reg, "citadel_server_authentication_failure_count")
		csrPEM, _ := newCSR(t)
		for _, tc := range []struct {
			name  string
			token string
			md    []string
			want  string
		}{
			{name: "no token", want: "kubernetes token: none presented"},
			{name: "garbage token", token: "not-a-jwt", want: "not authenticated"},
			{name: "token of another audience", token: otherAudience, want: "not authenticated for audiences [istio-ca]"},
			{name: "token of another cluster", token: token, md: []string{"clusterid", "west"}, want: `cluster "west"`},
			{name: "impersonation", token: token, md: nil, want: "impersonation"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				var err error
				if tc.name == "impersonation" {
					ctx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tc.token)
					md, _ := structpb.NewStruct(map[string]any{"ImpersonatedIdentity": "spiffe://cluster.local/ns/kube-system/sa/admin"})
					_, err = client.CreateCertificate(ctx, &pb.IstioCertificateRequest{Csr: string(csrPEM), Metadata: md})
				} else {
					_, err = createCertificate(ctx, client, csrPEM, tc.token, 0, tc.md...)
				}
				t.Logf("refused: %v", err)
				if status.Code(err) != codes.Unauthenticated || !strings.Contains(status.Convert(err).Message(), tc.want) {
					t.Errorf("CreateCertificate = %v, want Unauthenticated saying %q", err, tc.want)
				}
			})
		}
		if got := testutil.Metric(r.reg, "citadel_server_authentication_failure_count") - before; got != 5 {
			t.Errorf("citadel_server_authentication_failure_count grew by %v, want 5", got)
		}
	})

	t.Run("foreign client certificate", func(t *testing.T) {
		// A certificate from another CA fails the handshake: the CA asks
		// for client certificates of its own roots only.
		foreign := foreignAuthority(t)
		csrPEM, key := newCSR(t)
		leafPEM, err := foreign.Sign(csrPEM, []string{"spiffe://cluster.local/ns/kube-system/sa/admin"}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(leafPEM)
		leaf, _ := x509.ParseCertificate(block.Bytes)
		mtls := dial(t, r.svc.GRPCAddr(), roots, ca.IstiodDNSName, &tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key})
		_, err = createCertificate(ctx, mtls, csrPEM, "", 0)
		if err == nil {
			t.Fatal("CreateCertificate with a foreign CA's certificate succeeded")
		}
		t.Logf("refused: %v", err)
	})

	t.Run("bad requests", func(t *testing.T) {
		csrPEM, _ := newCSR(t)
		for _, tc := range []struct {
			name string
			csr  []byte
			ttl  int64
			kind string
		}{
			{name: "not a CSR", csr: []byte("hello"), kind: pki.KindCSR},
			{name: "TTL over the max", csr: csrPEM, ttl: int64((91 * 24 * time.Hour).Seconds()), kind: pki.KindTTL},
		} {
			t.Run(tc.name, func(t *testing.T) {
				before := testutil.Metric(r.reg, `citadel_server_csr_sign_err_count{error="`+tc.kind+`"}`)
				_, err := createCertificate(ctx, client, tc.csr, token, tc.ttl)
				if status.Code(err) != codes.InvalidArgument {
					t.Errorf("CreateCertificate = %v, want InvalidArgument", err)
				}
				if got := testutil.Metric(r.reg, `citadel_server_csr_sign_err_count{error="`+tc.kind+`"}`) - before; got != 1 {
					t.Errorf("sign errors of kind %s grew by %v, want 1", tc.kind, got)
				}
			})
		}
	})

	t.Run("metrics", func(t *testing.T) {
		for name, min := range map[string]float64{
			"citadel_server_csr_count":                   9,
			"citadel_server_success_cert_issuance_count": 3,
			"citadel_server_csr_parsing_err_count":       1,
			"citadel_server_root_cert_expiry_timestamp":  float64(time.Now().Add(9 * 365 * 24 * time.Hour).Unix()),
		} {
			if got := testutil.Metric(r.reg, name); got < min {
				t.Errorf("%s = %v, want at least %v", name, got, min)
			}
		}
	})

	t.Run("root published", func(t *testing.T) {
		want := r.svc.Authority().RootsPEM()
		cms := func(ns string) corev1client.ConfigMapInterface { return cs.CoreV1().ConfigMaps(ns) }
		// In namespaces that were there before the CA, kube-system
		// included, and not in the ignored ones.
		publishedRoot(t, ctx, cs, "default", want)
		publishedRoot(t, ctx, cs, "kube-system", want)
		if _, err := cms("kube-public").Get(ctx, ca.RootCertConfigMap, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("istio-ca-root-cert in kube-public: %v, want none", err)
		}
		cm, err := cms("app").Get(ctx, ca.RootCertConfigMap, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cm.Labels["istio.io/config"] != "true" {
			t.Errorf("labels %v, want istio.io/config=true", cm.Labels)
		}

		// In a namespace made after the CA started.
		createNamespace(t, ctx, cs, "late")
		publishedRoot(t, ctx, cs, "late", want)

		// Deleted: put back.
		if err := cms("late").Delete(ctx, ca.RootCertConfigMap, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		publishedRoot(t, ctx, cs, "late", want)

		// Edited: the root is repaired, a key someone added is kept.
		cm, err = cms("late").Get(ctx, ca.RootCertConfigMap, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cm.Data[ca.RootCertKey] = "tampered"
		cm.Data["extra"] = "kept"
		if _, err := cms("late").Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		publishedRoot(t, ctx, cs, "late", want)
		cm, err = cms("late").Get(ctx, ca.RootCertConfigMap, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if cm.Data["extra"] != "kept" {
			t.Errorf("repair dropped another key: %v", cm.Data)
		}
		if got := testutil.Metric(r.reg, `pilotwire_ca_root_cert_configmap_writes{op="update"}`); got < 1 {
			t.Errorf("root certificate updates = %v, want the repair counted", got)
		}
	})

	r.stop()
	if out := r.logs.String(); !strings.Contains(out, "certificate issued") || !strings.Contains(out, "not authenticated") {
		t.Errorf("the CA did not log its work at debug level:\n%s", out)
	}
}
