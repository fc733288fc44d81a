package k8stest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the key material of one cluster, generated per Start. ECDSA P-256
// throughout: as good as RSA for a test and far cheaper to generate.
type pki struct {
	// PEM-encoded material handed to the client.
	caPEM         []byte // CA that signs both the serving and the client cert
	clientCertPEM []byte // CN=pilotwire-test, O=system:masters
	clientKeyPEM  []byte

	// Files handed to kube-apiserver.
	caFile         string
	servingCert    string
	servingKey     string
	serviceAccount string // private key: signs and verifies SA tokens
}

// adminUser and adminGroup identify the test client. system:masters bypasses
// authorization whatever the mode.
const (
	adminUser  = "pilotwire-test"
	adminGroup = "system:masters"
)

// newPKI writes the apiserver's files into dir and returns the material.
func newPKI(dir string) (*pki, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "pilotwire-k8stest-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, caCert, err := sign(caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("sign CA: %w", err)
	}

	servingKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate serving key: %w", err)
	}
	servingDER, _, err := sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}, caCert, servingKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("sign serving cert: %w", err)
	}

	clientKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate client key: %w", err)
	}
	clientDER, _, err := sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: adminUser, Organization: []string{adminGroup}},
		NotBefore:   now.Add(-time.Hour),
		NotAfter:    now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, caCert, clientKey.Public(), caKey)
	if err != nil {
		return nil, fmt.Errorf("sign client cert: %w", err)
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate service account key: %w", err)
	}

	p := &pki{
		caPEM:          pemBlock("CERTIFICATE", caDER),
		clientCertPEM:  pemBlock("CERTIFICATE", clientDER),
		caFile:         filepath.Join(dir, "ca.crt"),
		servingCert:    filepath.Join(dir, "apiserver.crt"),
		servingKey:     filepath.Join(dir, "apiserver.key"),
		serviceAccount: filepath.Join(dir, "sa.key"),
	}
	if p.clientKeyPEM, err = keyPEM(clientKey); err != nil {
		return nil, err
	}
	servingKeyPEM, err := keyPEM(servingKey)
	if err != nil {
		return nil, err
	}
	saKeyPEM, err := keyPEM(saKey)
	if err != nil {
		return nil, err
	}
	for path, data := range map[string][]byte{
		p.caFile:         p.caPEM,
		p.servingCert:    pemBlock("CERTIFICATE", servingDER),
		p.servingKey:     servingKeyPEM,
		p.serviceAccount: saKeyPEM,
	} {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			return nil, fmt.Errorf("write %s: %w", path, err)
		}
	}
	return p, nil
}

// sign issues tmpl signed by parent's key and returns it in DER and parsed.
func sign(tmpl, parent *x509.Certificate, pub crypto.PublicKey, parentKey crypto.Signer) ([]byte, *x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl.SerialNumber = serial.Add(serial, big.NewInt(1)) // positive, never 0
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
	if err != nil {
		return nil, nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, nil, err
	}
	return der, cert, nil
}

func keyPEM(k *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return nil, fmt.Errorf("marshal key: %w", err)
	}
	return pemBlock("EC PRIVATE KEY", der), nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}
