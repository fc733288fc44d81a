package ads

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/url"
	"os"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// identityCheck enforces, with mutual TLS, that the client certificate's
// SPIFFE identity spiffe://<trust-domain>/ns/<ns>/sa/<sa> names the node's
// namespace, as Istio's XDS authentication does.
type identityCheck struct {
	trustDomain string // "" accepts any trust domain
}

// authorize checks the stream's peer identity against the node. Without
// mutual TLS configured it accepts everything.
func (s *Server) authorize(ctx context.Context, p *proxy) error {
	if s.identity == nil {
		return nil
	}
	pr, ok := peer.FromContext(ctx)
	if !ok {
		return status.Error(codes.Unauthenticated, "no peer")
	}
	ti, ok := pr.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return status.Error(codes.Unauthenticated, "no client certificate")
	}
	ids := spiffeIDs(ti.State.PeerCertificates[0])
	if len(ids) == 0 {
		return status.Error(codes.Unauthenticated, "client certificate has no SPIFFE URI SAN")
	}
	var errs []string
	for _, id := range ids {
		td, ns, _, err := parseSPIFFE(id)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if s.identity.trustDomain != "" && td != s.identity.trustDomain {
			errs = append(errs, fmt.Sprintf("%s: trust domain %q, want %q", id, td, s.identity.trustDomain))
			continue
		}
		if ns != p.Namespace {
			errs = append(errs, fmt.Sprintf("%s: namespace %q does not match the node's namespace %q", id, ns, p.Namespace))
			continue
		}
		return nil
	}
	return status.Errorf(codes.PermissionDenied, "identity check failed: %s", strings.Join(errs, "; "))
}

func spiffeIDs(cert *x509.Certificate) []*url.URL {
	var out []*url.URL
	for _, u := range cert.URIs {
		if u.Scheme == "spiffe" {
			out = append(out, u)
		}
	}
	return out
}

// parseSPIFFE splits spiffe://<td>/ns/<ns>/sa/<sa>.
func parseSPIFFE(u *url.URL) (td, ns, sa string, err error) {
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	if len(parts) != 4 || parts[0] != "ns" || parts[2] != "sa" || parts[1] == "" || parts[3] == "" {
		return "", "", "", fmt.Errorf("%s: not of the form spiffe://<trust-domain>/ns/<ns>/sa/<sa>", u)
	}
	return u.Host, parts[1], parts[3], nil
}

// tlsConfig builds the listener's TLS configuration: server certificate,
// and with clientCA, required and verified client certificates.
func tlsConfig(certFile, keyFile, clientCA string) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("load TLS key pair: %w", err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientCA != "" {
		pem, err := os.ReadFile(clientCA)
		if err != nil {
			return nil, fmt.Errorf("read client CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("client CA %s holds no PEM certificate", clientCA)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
