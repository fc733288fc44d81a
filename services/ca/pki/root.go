package pki

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"time"
)

// Istio's self-signed root defaults (pilot/pkg/bootstrap/istio_ca.go,
// security/pkg/cmd): RSA 2048, ten years, the trust domain as the
// organization.
const (
	DefaultRootTTL     = 3650 * 24 * time.Hour
	DefaultRootRSABits = 2048
	minRSABits         = 2048
)

// SelfSignedRoot makes a new root CA: an RSA key of rsaBits and a
// self-signed certificate valid for ttl from now, with organization org
// (Istio uses the trust domain) and the one key usage a root needs,
// certificate signing. It returns both as PEM; the key is PKCS#1, as in
// Istio's istio-ca-secret.
func SelfSignedRoot(org string, ttl time.Duration, rsaBits int, now time.Time) (certPEM, keyPEM []byte, err error) {
	if rsaBits < minRSABits {
		return nil, nil, fmt.Errorf("RSA key size %d is under the minimum %d", rsaBits, minRSABits)
	}
	if ttl <= 0 {
		return nil, nil, errors.New("root TTL must be positive")
	}
	key, err := rsa.GenerateKey(rand.Reader, rsaBits)
	if err != nil {
		return nil, nil, fmt.Errorf("generate root key: %w", err)
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{org}},
		NotBefore:             now,
		NotAfter:              now.Add(ttl),
		KeyUsage:              x509.KeyUsageCertSign,
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, nil, fmt.Errorf("create root certificate: %w", err)
	}
	keyPEM, err = encodePrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return EncodeCertificate(der), keyPEM, nil
}
