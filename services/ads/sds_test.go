package ads

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/structpb"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/pilotwire/pilotwire/internal/testkit/k8stest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// sdsEnv is a real kube-apiserver holding the gateway's Secrets and RBAC,
// and a frontend with mutual TLS reading them.
type sdsEnv struct {
	*tlsFrontend
	kube       kubernetes.Interface
	kubeconfig string
}

// startSDSEnv starts the cluster, makes namespaces istio-system and
// other, lets service account istio-ingressgateway of istio-system read
// the Secrets of its namespace (as Istio's gateway chart does), and
// starts a TLS frontend with --kubeconfig; pre publishes change records
// first.
func startSDSEnv(t *testing.T, pre func(*frontend), tune func(*Config)) *sdsEnv {
	t.Helper()
	cl := k8stest.Start(t)
	kube := kubernetes.NewForConfigOrDie(cl.Config)
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	for _, ns := range []string{"istio-system", "other"} {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kube.RbacV1().Roles("istio-system").Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "gateway-secrets"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "watch", "list"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := kube.RbacV1().RoleBindings("istio-system").Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "gateway-secrets"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "gateway-secrets"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "istio-ingressgateway", Namespace: "istio-system"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	ca := newCA(t)
	dir := t.TempDir()
	certFile, keyFile := writePair(t, dir, ca.issue(t, 2, "", true))
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	f := startFrontendTuned(t, pre, func(c *Config) {
		c.TLSCert, c.TLSKey, c.ClientCA, c.TrustDomain = certFile, keyFile, caFile, "cluster.local"
		c.Kubeconfig = cl.Kubeconfig
		if tune != nil {
			tune(c)
		}
	})
	return &sdsEnv{tlsFrontend: &tlsFrontend{frontend: f, ca: ca, pool: pool, serial: 10}, kube: kube, kubeconfig: cl.Kubeconfig}
}

// credential is a certificate and its key, PEM, as a Secret holds them.
type credential struct{ cert, key []byte }

func (e *sdsEnv) newCredential(t *testing.T) credential {
	t.Helper()
	e.serial++
	c := e.ca.issue(t, e.serial, "", true)
	kb, err := x509.MarshalECPrivateKey(c.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	return credential{
		cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Certificate[0]}),
		key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
	}
}

// putSecret creates or replaces a kubernetes.io/tls Secret with ca.crt.
func (e *sdsEnv) putSecret(t *testing.T, ns, name string, c credential) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": c.cert, "tls.key": c.key, "ca.crt": e.ca.pem},
	}
	if _, err := e.kube.CoreV1().Secrets(ns).Update(ctx, s, metav1.UpdateOptions{}); err == nil {
		return
	}
	if _, err := e.kube.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// dialAs opens an ADS stream with a client certificate for ns/sa.
func (e *sdsEnv) dialAs(ctx context.Context, t *testing.T, ns, sa string, node *core.Node) *client {
	t.Helper()
	e.serial++
	tc := &tls.Config{RootCAs: e.pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{e.ca.issue(t, e.serial, "spiffe://cluster.local/ns/"+ns+"/sa/"+sa, false)}}
	cc, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	s, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &client{t: t, stream: s, node: node, cc: cc}
}

func (e *sdsEnv) dialDeltaAs(ctx context.Context, t *testing.T, ns, sa string) grpc.BidiStreamingClient[discovery.DeltaDiscoveryRequest, discovery.DeltaDiscoveryResponse] {
	t.Helper()
	e.serial++
	tc := &tls.Config{RootCAs: e.pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{e.ca.issue(t, e.serial, "spiffe://cluster.local/ns/"+ns+"/sa/"+sa, false)}}
	cc, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	s, err := discovery.NewAggregatedDiscoveryServiceClient(cc).DeltaAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// routerNode is a gateway's node: router~, labels istio=ingressgateway.
func routerNode(t *testing.T, ns string) *core.Node {
	t.Helper()
	md, err := structpb.NewStruct(map[string]any{"NAMESPACE": ns, "LABELS": map[string]any{"istio": "ingressgateway"}})
	if err != nil {
		t.Fatal(err)
	}
	return &core.Node{Id: "router~10.0.0.5~ingress-0." + ns + "~" + ns + ".svc.cluster.local", Metadata: md}
}

// secrets decodes a response's secrets by name.
func secrets(t *testing.T, r *discovery.DiscoveryResponse) map[string]*tlsv3.Secret {
	t.Helper()
	if r.GetTypeUrl() != resource.SecretType {
		t.Fatalf("response of type %s, want secrets", r.GetTypeUrl())
	}
	out := map[string]*tlsv3.Secret{}
	for _, a := range r.GetResources() {
		var s tlsv3.Secret
		if err := a.UnmarshalTo(&s); err != nil {
			t.Fatal(err)
		}
		out[s.GetName()] = &s
	}
	return out
}

// wantCert checks a TlsCertificate secret carries c inline, as Istio
// sends it.
func wantCert(t *testing.T, s *tlsv3.Secret, c credential) {
	t.Helper()
	tc := s.GetTlsCertificate()
	if tc == nil {
		t.Fatalf("secret %s: no tls_certificate: %v", s.GetName(), s)
	}
	if !bytes.Equal(tc.GetCertificateChain().GetInlineBytes(), c.cert) || !bytes.Equal(tc.GetPrivateKey().GetInlineBytes(), c.key) {
		t.Fatalf("secret %s: certificate chain or private key differs from the Secret's", s.GetName())
	}
}

// ack answers r.
func (c *client) ack(r *discovery.DiscoveryResponse, names ...string) {
	c.t.Helper()
	c.send(&discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce(), ResourceNames: names})
}

// recvWithin receives one response, failing after d.
func (c *client) recvWithin(d time.Duration) *discovery.DiscoveryResponse {
	c.t.Helper()
	type res struct {
		r   *discovery.DiscoveryResponse
		err error
	}
	ch := make(chan res, 1)
	go func() { r, err := c.stream.Recv(); ch <- res{r, err} }()
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case x := <-ch:
		if x.err != nil {
			c.t.Fatalf("recv: %v", x.err)
		}
		return x.r
	case <-tm.C:
		c.t.Fatalf("no response within %v", d)
	}
	return nil
}

const ingressGateway = `{"apiVersion":"networking.istio.io/v1","kind":"Gateway",
 "metadata":{"name":"ingress","namespace":"istio-system","creationTimestamp":"2024-01-01T00:00:00Z"},
 "spec":{"selector":{"istio":"ingressgateway"},"servers":[
  {"port":{"number":443,"name":"https","protocol":"HTTPS"},"hosts":["shop.example.com"],
   "tls":{"mode":"MUTUAL","credentialName":"kubernetes-gateway://istio-system/gw-cred"}}]}}`

// TestSDSGatewayCredentials: a gateway (router~) with a verified identity
// gets over ADS the Secrets its listeners name, from the frontend's own
// watch of a real kube-apiserver: kubernetes://<name> with the chain and
// key inline, <name>-cacert as a validation context, and
// kubernetes-gateway://<ns>/<name> when a Gateway serving it references
// it; a changed Secret is pushed; a missing one is left out without
// ending the stream and sent once created; nothing is served to another
// namespace, to a service account that may not read Secrets (but the CA
// bundle is), to an unreferenced kubernetes-gateway:// name, or without
// a verified identity.
func TestSDSGatewayCredentials(t *testing.T) {
	var gwSeq uint64
	e := startSDSEnv(t, func(f *frontend) {
		var obj map[string]any
		if err := json.Unmarshal([]byte(ingressGateway), &obj); err != nil {
			t.Fatal(err)
		}
		gwSeq = f.publish(t, pb.Op_OP_ADD, "networking.istio.io", "Gateway", obj)
	}, nil)
	e.waitApplied(t, gwSeq)
	myCred, gwCred := e.newCredential(t), e.newCredential(t)
	e.putSecret(t, "istio-system", "my-cred", myCred)
	e.putSecret(t, "istio-system", "gw-cred", gwCred)
	e.putSecret(t, "other", "other-cred", e.newCredential(t))
	testutil.Eventually(t, "the three Secrets in the frontend's watch", func() bool { return e.gauge("pilotwire_ads_sds_secrets_cached") >= 3 })

	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()

	t.Run("kubernetes name, update, missing then created", func(t *testing.T) {
		c := e.dialAs(ctx, t, "istio-system", "istio-ingressgateway", routerNode(t, "istio-system"))
		names := []string{"kubernetes://my-cred", "kubernetes://my-cred-cacert", "kubernetes://late-cred"}
		c.send(&discovery.DiscoveryRequest{TypeUrl: resource.SecretType, ResourceNames: names})
		r := c.recv()
		got := secrets(t, r)
		if len(got) != 2 {
			t.Fatalf("got secrets %v, want my-cred and my-cred-cacert (late-cred does not exist)", keys(got))
		}
		wantCert(t, got["kubernetes://my-cred"], myCred)
		if vc := got["kubernetes://my-cred-cacert"].GetValidationContext(); !bytes.Equal(vc.GetTrustedCa().GetInlineBytes(), e.ca.pem) {
			t.Fatalf("my-cred-cacert: trusted CA %q, want the Secret's ca.crt", vc.GetTrustedCa().GetInlineBytes())
		}
		c.ack(r, names...)

		// The Secret is rotated: only it is pushed.
		rotated := e.newCredential(t)
		e.putSecret(t, "istio-system", "my-cred", rotated)
		r = c.recvWithin(testutil.DefaultTimeout)
		got = secrets(t, r)
		wantCert(t, got["kubernetes://my-cred"], rotated)
		c.ack(r, names...)

		// A Secret that did not exist is sent once it is created.
		late := e.newCredential(t)
		e.putSecret(t, "istio-system", "late-cred", late)
		r = c.recvWithin(testutil.DefaultTimeout)
		got = secrets(t, r)
		wantCert(t, got["kubernetes://late-cred"], late)
		if _, ok := got["kubernetes://my-cred"]; ok {
			t.Errorf("unchanged my-cred sent again")
		}
		c.ack(r, names...)
	})

	t.Run("Gateway API name referenced by the gateway's listeners", func(t *testing.T) {
		c := e.dialAs(ctx, t, "istio-system", "istio-ingressgateway", routerNode(t, "istio-system"))
		names := []string{"kubernetes-gateway://istio-system/gw-cred", "kubernetes-gateway://istio-system/gw-cred-cacert", "kubernetes-gateway://istio-system/my-cred"}
		c.send(&discovery.DiscoveryRequest{TypeUrl: resource.SecretType, ResourceNames: names})
		got := secrets(t, c.recv())
		if want := []string{"kubernetes-gateway://istio-system/gw-cred", "kubernetes-gateway://istio-system/gw-cred-cacert"}; !slices.Equal(keys(got), want) {
			t.Fatalf("got %v, want %v (my-cred is referenced by no Gateway of this proxy)", keys(got), want)
		}
		wantCert(t, got["kubernetes-gateway://istio-system/gw-cred"], gwCred)
	})

	t.Run("refused: another namespace, an account without access, no reference", func(t *testing.T) {
		before := e.gauge("pilot_sds_certificate_errors_total")
		// A gateway of namespace other asks for istio-system's Secret.
		c := e.dialAs(ctx, t, "other", "istio-ingressgateway", routerNode(t, "other"))
		c.send(&discovery.DiscoveryRequest{TypeUrl: resource.SecretType, ResourceNames: []string{"kubernetes://istio-system/my-cred", "kubernetes-gateway://istio-system/gw-cred"}})
		if got := secrets(t, c.recv()); len(got) != 0 {
			t.Fatalf("a proxy of namespace other got %v", keys(got))
		}
		// An account of istio-system that may not list Secrets gets the CA
		// bundle only.
		c2 := e.dialAs(ctx, t, "istio-system", "nobody", routerNode(t, "istio-system"))
		c2.send(&discovery.DiscoveryRequest{TypeUrl: resource.SecretType, ResourceNames: []string{"kubernetes://my-cred", "kubernetes://my-cred-cacert"}})
		if got := secrets(t, c2.recv()); !slices.Equal(keys(got), []string{"kubernetes://my-cred-cacert"}) {
			t.Fatalf("service account nobody got %v, want the CA bundle only", keys(got))
		}
		// Both streams are still served.
		c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
		if r := c.recv(); r.GetTypeUrl() != resource.ClusterType {
			t.Fatalf("got %s after the refusal, want clusters", r.GetTypeUrl())
		}
		if after := e.gauge("pilot_sds_certificate_errors_total"); after < before+3 {
			t.Errorf("pilot_sds_certificate_errors_total rose by %v, want at least 3", after-before)
		}
	})

	t.Run("delta", func(t *testing.T) {
		s := e.dialDeltaAs(ctx, t, "istio-system", "istio-ingressgateway")
		node := routerNode(t, "istio-system")
		if err := s.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: resource.SecretType, ResourceNamesSubscribe: []string{"kubernetes://gw-delta", "kubernetes://nope"}}); err != nil {
			t.Fatal(err)
		}
		r, err := s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(r.GetResources()) != 0 || !slices.Equal(r.GetRemovedResources(), []string{"kubernetes://gw-delta", "kubernetes://nope"}) {
			t.Fatalf("first delta response: %d resources, removed %v; want none, both removed", len(r.GetResources()), r.GetRemovedResources())
		}
		if err := s.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: resource.SecretType, ResponseNonce: r.GetNonce()}); err != nil {
			t.Fatal(err)
		}
		cred := e.newCredential(t)
		e.putSecret(t, "istio-system", "gw-delta", cred)
		r, err = s.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if len(r.GetResources()) != 1 || r.GetResources()[0].GetName() != "kubernetes://gw-delta" || len(r.GetRemovedResources()) != 0 {
			t.Fatalf("after the Secret's creation: %v", r)
		}
		var sec tlsv3.Secret
		if err := r.GetResources()[0].GetResource().UnmarshalTo(&sec); err != nil {
			t.Fatal(err)
		}
		wantCert(t, &sec, cred)
	})

	t.Run("no verified identity: nothing", func(t *testing.T) {
		f := runFrontend(t, e.url, "fe-plain", func(c *Config) { c.Kubeconfig = e.kubeconfig })
		c := dial(ctx, t, f.addr, routerNode(t, "istio-system"))
		c.send(&discovery.DiscoveryRequest{TypeUrl: resource.SecretType, ResourceNames: []string{"kubernetes://my-cred-cacert"}})
		if got := secrets(t, c.recv()); len(got) != 0 {
			t.Fatalf("a plaintext stream got %v", keys(got))
		}
	})
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
