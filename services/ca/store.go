package ca

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/pilotwire/pilotwire/services/ca/pki"
)

// The Secrets and keys of Istio's CA (security/pkg/pki/ca), so that a
// cluster moving from istiod keeps its root, and its cacerts keep working.
const (
	// SelfSignedSecret holds a self-signed root the CA made.
	SelfSignedSecret = "istio-ca-secret"
	// PluginSecret holds an operator's CA (a plug-in CA); it wins over
	// SelfSignedSecret.
	PluginSecret = "cacerts"
	// selfSignedSecretType is the type Istio gives istio-ca-secret.
	selfSignedSecretType corev1.SecretType = "istio.io/ca-root"

	keyCACert    = "ca-cert.pem"
	keyCAKey     = "ca-key.pem"
	keyCertChain = "cert-chain.pem"
	keyRootCert  = "root-cert.pem"
	keyKey       = "key.pem"
	// A kubernetes.io/tls Secret as cacerts (cert-manager's shape).
	keyTLSCert = "tls.crt"
	keyTLSKey  = "tls.key"
	keyTLSCA   = "ca.crt"
)

// Sources of the CA material, as logged and in metrics.
const (
	sourcePlugin     = "plugin"
	sourceSelfSigned = "self-signed"
)

// errConfig marks CA material that is there but unusable: retrying will
// not help, the operator must fix it.
var errConfig = errors.New("CA configuration")

// caStore finds the CA's material in Kubernetes, or makes and keeps it.
type caStore struct {
	// Set at construction.
	client    kubernetes.Interface
	namespace string
	org       string // the self-signed root's organization: the trust domain
	rootTTL   time.Duration
	rsaBits   int
	opts      pki.Options
	log       *slog.Logger
}

// load returns the CA: the plug-in CA of the cacerts Secret when it exists;
// otherwise the self-signed root of istio-ca-secret, made and stored
// first if absent. When replicas race to store one, the loser of the
// create reads and uses the winner's. API errors are retried until ctx
// ends; unusable material is not.
func (s *caStore) load(ctx context.Context) (*pki.Authority, string, error) {
	backoff := 100 * time.Millisecond
	for {
		a, source, err := s.try(ctx)
		if err == nil {
			return a, source, nil
		}
		if errors.Is(err, errConfig) {
			return nil, "", err
		}
		s.log.Warn("CA material not loaded; retrying", "err", err, "retry_in", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, "", fmt.Errorf("load CA: %w (last error: %w)", ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (s *caStore) try(ctx context.Context) (*pki.Authority, string, error) {
	secrets := s.client.CoreV1().Secrets(s.namespace)
	plugin, err := secrets.Get(ctx, PluginSecret, metav1.GetOptions{})
	switch {
	case err == nil:
		a, err := s.fromPlugin(plugin)
		if err != nil {
			return nil, "", err
		}
		return a, sourcePlugin, nil
	case !apierrors.IsNotFound(err):
		return nil, "", fmt.Errorf("get secret %s/%s: %w", s.namespace, PluginSecret, err)
	}

	existing, err := secrets.Get(ctx, SelfSignedSecret, metav1.GetOptions{})
	switch {
	case err == nil:
		a, err := s.fromSelfSigned(existing)
		return a, sourceSelfSigned, err
	case !apierrors.IsNotFound(err):
		return nil, "", fmt.Errorf("get secret %s/%s: %w", s.namespace, SelfSignedSecret, err)
	}

	certPEM, keyPEM, err := pki.SelfSignedRoot(s.org, s.rootTTL, s.rsaBits, time.Now())
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", errConfig, err)
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SelfSignedSecret, Namespace: s.namespace},
		Type:       selfSignedSecretType,
		// Istio's layout: the root is both the CA certificate and the
		// root; the workload keys stay empty.
		Data: map[string][]byte{
			keyCertChain: nil,
			keyKey:       nil,
			keyRootCert:  certPEM,
			keyCACert:    certPEM,
			keyCAKey:     keyPEM,
		},
	}
	created, err := secrets.Create(ctx, secret, metav1.CreateOptions{})
	switch {
	case err == nil:
		s.log.Info("made a self-signed root and stored it", "secret", s.namespace+"/"+SelfSignedSecret)
		a, err := s.fromSelfSigned(created)
		return a, sourceSelfSigned, err
	case apierrors.IsAlreadyExists(err):
		// Another replica stored its root first: use the winner's (the
		// next try reads it).
		s.log.Info("another replica stored the root first; using it", "secret", s.namespace+"/"+SelfSignedSecret)
		winner, err := secrets.Get(ctx, SelfSignedSecret, metav1.GetOptions{})
		if err != nil {
			return nil, "", fmt.Errorf("get secret %s/%s: %w", s.namespace, SelfSignedSecret, err)
		}
		a, err := s.fromSelfSigned(winner)
		return a, sourceSelfSigned, err
	default:
		return nil, "", fmt.Errorf("create secret %s/%s: %w", s.namespace, SelfSignedSecret, err)
	}
}

// fromSelfSigned reads istio-ca-secret: its CA certificate is the root.
func (s *caStore) fromSelfSigned(secret *corev1.Secret) (*pki.Authority, error) {
	cert, key := secret.Data[keyCACert], secret.Data[keyCAKey]
	a, err := pki.New(cert, key, nil, cert, s.opts)
	if err != nil {
		return nil, fmt.Errorf("%w: secret %s/%s: %w", errConfig, secret.Namespace, secret.Name, err)
	}
	return a, nil
}

// fromPlugin reads cacerts, in Istio's layout (ca-cert.pem, ca-key.pem,
// root-cert.pem, cert-chain.pem) or as a kubernetes.io/tls Secret
// (tls.crt, tls.key, ca.crt; the chain is tls.crt then ca.crt, as Istio
// reads it). Some of the keys without the rest is an error, as in Istio.
func (s *caStore) fromPlugin(secret *corev1.Secret) (*pki.Authority, error) {
	d := secret.Data
	var cert, key, chain, roots []byte
	if len(d[keyTLSCert]) > 0 {
		cert, key, roots = d[keyTLSCert], d[keyTLSKey], d[keyTLSCA]
		chain = append(append([]byte(nil), d[keyTLSCert]...), d[keyTLSCA]...)
	} else {
		cert, key, chain, roots = d[keyCACert], d[keyCAKey], d[keyCertChain], d[keyRootCert]
	}
	var missing []string
	for _, part := range []struct {
		name string
		data []byte
	}{{"certificate", cert}, {"key", key}, {"root certificate", roots}} {
		if len(part.data) == 0 {
			missing = append(missing, part.name)
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: secret %s/%s is incomplete: no %v (want %s, %s, %s and %s)",
			errConfig, secret.Namespace, secret.Name, missing, keyCACert, keyCAKey, keyRootCert, keyCertChain)
	}
	a, err := pki.New(cert, key, chain, roots, s.opts)
	if err != nil {
		return nil, fmt.Errorf("%w: secret %s/%s: %w", errConfig, secret.Namespace, secret.Name, err)
	}
	return a, nil
}
