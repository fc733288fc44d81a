package pki

import (
	"bytes"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"net/url"
	"slices"
	"time"
)

// Istio's defaults (security/pkg/cmd): workload certificates live 24h
// unless the request asks otherwise, and at most 90 days.
const (
	DefaultWorkloadCertTTL    = 24 * time.Hour
	DefaultMaxWorkloadCertTTL = 90 * 24 * time.Hour
	// ClockSkew backdates every issued certificate, so a workload whose
	// clock is a little behind the CA's accepts it at once (Istio: 2m).
	ClockSkew = 2 * time.Minute
)

// Kinds of signing errors, the values of the error label of
// citadel_server_csr_sign_err_count (Istio's).
const (
	KindCSR     = "CSR_ERROR"
	KindTTL     = "TTL_ERROR"
	KindCertGen = "CERT_GEN_ERROR"
)

// SignError is why Sign refused or failed; Kind is one of the Kind
// constants: CSR and TTL errors are the caller's, CertGen ones the CA's.
type SignError struct {
	Kind string
	Err  error
}

func (e *SignError) Error() string { return e.Err.Error() }
func (e *SignError) Unwrap() error { return e.Err }

// Options are an Authority's issuing policy.
type Options struct {
	// DefaultTTL is a workload certificate's lifetime when the request
	// names none (zero: DefaultWorkloadCertTTL).
	DefaultTTL time.Duration
	// MaxTTL is the longest lifetime a request may ask; a longer one is
	// refused, as Istio does (zero: DefaultMaxWorkloadCertTTL).
	MaxTTL time.Duration
	// Now is the clock (nil: time.Now).
	Now func() time.Time
}

// Authority signs workload certificates with one CA key. It is immutable
// and safe for concurrent use. Its String and LogValue show the signing
// certificate, never the key.
type Authority struct {
	// All set at construction, read-only after.
	cert       *x509.Certificate // the signing certificate
	key        crypto.Signer     // its private key: never logged, never sent
	chain      []string          // PEM certificates between a leaf and the roots, one a string (Istio's cert-chain.pem, split)
	chainDER   [][]byte          // chain, parsed
	rootsPEM   []byte            // the trust bundle published to workloads
	roots      *x509.CertPool
	rootCerts  []*x509.Certificate
	defaultTTL time.Duration
	maxTTL     time.Duration
	now        func() time.Time
}

// New builds an Authority from PEM: the signing certificate and its key,
// the chain above it (may be empty) and the root bundle. It checks that
// the key is the certificate's, that the certificate may sign others and
// is valid now, and that it chains to a root through the chain.
func New(certPEM, keyPEM, chainPEM, rootsPEM []byte, opts Options) (*Authority, error) {
	if opts.DefaultTTL <= 0 {
		opts.DefaultTTL = DefaultWorkloadCertTTL
	}
	if opts.MaxTTL <= 0 {
		opts.MaxTTL = DefaultMaxWorkloadCertTTL
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	certs, err := ParseCertificates(certPEM)
	if err != nil {
		return nil, fmt.Errorf("CA certificate: %w", err)
	}
	cert := certs[0]
	key, err := ParsePrivateKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("CA key: %w", err)
	}
	if !publicKeysEqual(cert.PublicKey, key.Public()) {
		return nil, errors.New("CA key does not match the CA certificate")
	}
	if !cert.IsCA || (cert.KeyUsage != 0 && cert.KeyUsage&x509.KeyUsageCertSign == 0) {
		return nil, fmt.Errorf("CA certificate %q may not sign certificates", cert.Subject)
	}
	now := opts.Now()
	if now.After(cert.NotAfter) || now.Before(cert.NotBefore) {
		return nil, fmt.Errorf("CA certificate %q is not valid now (valid %s to %s)", cert.Subject, cert.NotBefore.Format(time.RFC3339), cert.NotAfter.Format(time.RFC3339))
	}
	rootCerts, err := ParseCertificates(rootsPEM)
	if err != nil {
		return nil, fmt.Errorf("root certificates: %w", err)
	}
	roots := x509.NewCertPool()
	for _, r := range rootCerts {
		roots.AddCert(r)
	}
	a := &Authority{
		cert: cert, key: key,
		rootsPEM: bytes.Clone(rootsPEM), roots: roots, rootCerts: rootCerts,
		defaultTTL: opts.DefaultTTL, maxTTL: opts.MaxTTL, now: opts.Now,
	}
	intermediates := x509.NewCertPool()
	for _, c := range certs[1:] {
		intermediates.AddCert(c)
	}
	if len(bytes.TrimSpace(chainPEM)) > 0 {
		chain, err := ParseCertificates(chainPEM)
		if err != nil {
			return nil, fmt.Errorf("certificate chain: %w", err)
		}
		for _, c := range chain {
			intermediates.AddCert(c)
			a.chainDER = append(a.chainDER, c.Raw)
		}
	} else if !slices.ContainsFunc(rootCerts, cert.Equal) {
		// An intermediate CA given without its chain: a leaf still needs
		// the signing certificate to reach the root.
		a.chainDER = [][]byte{cert.Raw}
	}
	for _, der := range a.chainDER {
		a.chain = append(a.chain, string(EncodeCertificate(der)))
	}
	if _, err := cert.Verify(x509.VerifyOptions{
		Roots: roots, Intermediates: intermediates, CurrentTime: now,
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny},
	}); err != nil {
		return nil, fmt.Errorf("CA certificate %q does not chain to the root certificates: %w", cert.Subject, err)
	}
	return a, nil
}

// Sign issues a workload certificate for the CSR's public key, naming only
// identities (URIs, spiffe://...) whatever the CSR asks. ttl <= 0 takes the
// default lifetime; a ttl over the maximum is refused. The certificate
// never outlives the signing one. It returns the certificate as PEM.
func (a *Authority) Sign(csrPEM []byte, identities []string, ttl time.Duration) ([]byte, error) {
	csr, err := ParseCSR(csrPEM)
	if err != nil {
		return nil, &SignError{Kind: KindCSR, Err: err}
	}
	if ttl > a.maxTTL {
		return nil, &SignError{Kind: KindTTL, Err: fmt.Errorf("requested TTL %s is greater than the max allowed TTL %s", ttl, a.maxTTL)}
	}
	if ttl <= 0 {
		ttl = a.defaultTTL
	}
	if len(identities) == 0 {
		return nil, &SignError{Kind: KindCertGen, Err: errors.New("no identity to certify")}
	}
	uris := make([]*url.URL, 0, len(identities))
	for _, id := range identities {
		u, err := url.Parse(id)
		if err != nil || u.Scheme == "" {
			return nil, &SignError{Kind: KindCertGen, Err: fmt.Errorf("identity %q is not a URI", id)}
		}
		uris = append(uris, u)
	}
	tmpl, err := a.template(ttl)
	if err != nil {
		return nil, &SignError{Kind: KindCertGen, Err: err}
	}
	tmpl.URIs = uris
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, csr.PublicKey, a.key)
	if err != nil {
		return nil, &SignError{Kind: KindCertGen, Err: fmt.Errorf("create certificate: %w", err)}
	}
	return EncodeCertificate(der), nil
}

// template is a leaf certificate as Istio issues one: no subject (so the
// SAN extension is critical), backdated by ClockSkew, for both server and
// client authentication.
func (a *Authority) template(ttl time.Duration) (*x509.Certificate, error) {
	now := a.now()
	if !now.Before(a.cert.NotAfter) {
		return nil, fmt.Errorf("the CA certificate expired at %s", a.cert.NotAfter.Format(time.RFC3339))
	}
	notAfter := now.Add(ttl)
	if notAfter.After(a.cert.NotAfter) {
		notAfter = a.cert.NotAfter
	}
	serial, err := serialNumber()
	if err != nil {
		return nil, err
	}
	return &x509.Certificate{
		SerialNumber:          serial,
		NotBefore:             now.Add(-ClockSkew),
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}, nil
}

// IssueServing issues the CA's own TLS certificate for dnsNames, with a
// fresh ECDSA P-256 key that stays in memory, and returns it with the chain
// above it (so a client that trusts only the root verifies it).
func (a *Authority) IssueServing(dnsNames []string, ttl time.Duration) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate serving key: %w", err)
	}
	tmpl, err := a.template(ttl)
	if err != nil {
		return nil, err
	}
	tmpl.DNSNames = dnsNames
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, key.Public(), a.key)
	if err != nil {
		return nil, fmt.Errorf("create serving certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parse serving certificate: %w", err)
	}
	chain := append([][]byte{der}, a.chainDER...)
	return &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}, nil
}

// CertChain is the cert_chain of a CreateCertificate response for leafPEM,
// in Istio's order: the leaf, then each certificate of the configured
// chain (an intermediate signing certificate given without a chain stands
// for it), then the root bundle, whole, last.
func (a *Authority) CertChain(leafPEM []byte) []string {
	out := make([]string, 0, len(a.chain)+2)
	out = append(out, string(leafPEM))
	out = append(out, a.chain...)
	return append(out, string(a.rootsPEM))
}

// RootsPEM is the root bundle workloads trust (istio-ca-root-cert).
func (a *Authority) RootsPEM() []byte { return bytes.Clone(a.rootsPEM) }

// Roots is the root bundle as a pool, for verifying client certificates.
func (a *Authority) Roots() *x509.CertPool { return a.roots.Clone() }

// RootExpiry is when the first root certificate expires.
func (a *Authority) RootExpiry() time.Time { return a.rootCerts[0].NotAfter }

// Certificate is the signing certificate.
func (a *Authority) Certificate() *x509.Certificate { return a.cert }

// String describes the authority without its key.
func (a *Authority) String() string {
	return fmt.Sprintf("CA %q (serial %x, until %s, %d root(s))", a.cert.Subject, a.cert.SerialNumber, a.cert.NotAfter.Format(time.RFC3339), len(a.rootCerts))
}

// GoString is String, so that %#v shows no key either.
func (a *Authority) GoString() string { return a.String() }

// LogValue describes the authority in a log line, without its key.
func (a *Authority) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("subject", a.cert.Subject.String()),
		slog.String("serial", a.cert.SerialNumber.Text(16)),
		slog.Time("not_after", a.cert.NotAfter),
		slog.Int("roots", len(a.rootCerts)),
	)
}

var (
	_ fmt.Stringer   = (*Authority)(nil)
	_ fmt.GoStringer = (*Authority)(nil)
	_ slog.LogValuer = (*Authority)(nil)
)

func serialNumber() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("serial number: %w", err)
	}
	return n, nil
}

// publicKeysEqual compares two public keys of the standard library's types.
func publicKeysEqual(a, b crypto.PublicKey) bool {
	type equaler interface{ Equal(crypto.PublicKey) bool }
	ea, ok := a.(equaler)
	return ok && ea.Equal(b)
}
