package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
)

// PEM block types.
const (
	blockCertificate = "CERTIFICATE"
	blockCSR         = "CERTIFICATE REQUEST"
	blockRSAKey      = "RSA PRIVATE KEY"
	blockECKey       = "EC PRIVATE KEY"
	blockPKCS8Key    = "PRIVATE KEY"
)

// ParseCertificates parses every CERTIFICATE block of data, in order; it
// fails on a block it cannot parse or when there is none.
func ParseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != blockCertificate {
			continue
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("parse certificate %d: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("no PEM certificate found")
	}
	return certs, nil
}

// EncodeCertificate returns der as a PEM CERTIFICATE block.
func EncodeCertificate(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: blockCertificate, Bytes: der})
}

// ParsePrivateKey parses the first private key block of data: PKCS#1 RSA,
// SEC 1 EC or PKCS#8 (what Istio's CA and cert tooling write). Errors never
// quote the key.
func ParsePrivateKey(data []byte) (crypto.Signer, error) {
	for rest := data; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return nil, errors.New("no PEM private key found")
		}
		switch block.Type {
		case blockRSAKey:
			k, err := x509.ParsePKCS1PrivateKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parse PKCS#1 RSA key: %w", err)
			}
			return k, nil
		case blockECKey:
			k, err := x509.ParseECPrivateKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parse EC key: %w", err)
			}
			return k, nil
		case blockPKCS8Key:
			k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
			if err != nil {
				return nil, fmt.Errorf("parse PKCS#8 key: %w", err)
			}
			s, ok := k.(crypto.Signer)
			if !ok {
				return nil, fmt.Errorf("PKCS#8 key of type %T cannot sign", k)
			}
			return s, nil
		}
	}
}

// encodePrivateKey returns key as PEM: PKCS#1 for RSA (as Istio writes
// istio-ca-secret), SEC 1 for EC, PKCS#8 otherwise.
func encodePrivateKey(key crypto.Signer) ([]byte, error) {
	switch k := key.(type) {
	case *rsa.PrivateKey:
		return pem.EncodeToMemory(&pem.Block{Type: blockRSAKey, Bytes: x509.MarshalPKCS1PrivateKey(k)}), nil
	case *ecdsa.PrivateKey:
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return nil, fmt.Errorf("marshal EC key: %w", err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: blockECKey, Bytes: der}), nil
	case ed25519.PrivateKey:
		der, err := x509.MarshalPKCS8PrivateKey(k)
		if err != nil {
			return nil, fmt.Errorf("marshal key: %w", err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: blockPKCS8Key, Bytes: der}), nil
	default:
		return nil, fmt.Errorf("unsupported key type %T", key)
	}
}

// ParseCSR parses a PEM CERTIFICATE REQUEST and checks its signature (the
// requester holds the key it asks a certificate for).
func ParseCSR(data []byte) (*x509.CertificateRequest, error) {
	block, _ := pem.Decode(data)
	if block == nil {
		return nil, errors.New("no PEM block in the CSR")
	}
	if block.Type != blockCSR && block.Type != "NEW CERTIFICATE REQUEST" {
		return nil, fmt.Errorf("PEM block %q is not a CERTIFICATE REQUEST", block.Type)
	}
	csr, err := x509.ParseCertificateRequest(block.Bytes)
	if err != nil {
		return nil, fmt.Errorf("parse CSR: %w", err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("CSR signature: %w", err)
	}
	return csr, nil
}
