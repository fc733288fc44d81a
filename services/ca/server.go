package ca

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	pb "istio.io/api/security/v1alpha1"

	"github.com/pilotwire/pilotwire/services/ca/pki"
)

// certService is istio.v1.auth.IstioCertificateService: it authenticates
// the caller and signs its CSR for the caller's own identity.
type certService struct {
	pb.UnimplementedIstioCertificateServiceServer
	// Set at construction, read-only after.
	authority      *pki.Authority
	authenticators []Authenticator
	metrics        *metrics
	log            *slog.Logger
}

var _ pb.IstioCertificateServiceServer = (*certService)(nil)

// CreateCertificate signs the request's CSR. The certificate names the
// authenticated caller's identity, whatever the CSR claims (as Istio's CA
// does); the response chain is leaf first, root bundle last.
func (s *certService) CreateCertificate(ctx context.Context, req *pb.IstioCertificateRequest) (*pb.IstioCertificateResponse, error) {
	s.metrics.csrs.Inc()
	log := s.log
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		log = log.With("peer", p.Addr.String())
	}
	caller, err := authenticate(ctx, s.authenticators)
	if err != nil {
		s.metrics.authnFailures.Inc()
		log.Warn("certificate request refused: not authenticated", "reason", err.Error())
		return nil, status.Errorf(codes.Unauthenticated, "authentication failed: %v", err)
	}
	log = log.With("identity", caller.Identities, "method", caller.Method)
	if req.GetMetadata().GetFields()[metaImpersonate].GetStringValue() != "" {
		s.metrics.authnFailures.Inc()
		log.Warn("certificate request refused: impersonation asked")
		return nil, status.Error(codes.Unauthenticated, "impersonation is not allowed: this CA trusts no node agent to ask for another identity")
	}
	ttl := time.Duration(req.GetValidityDuration()) * time.Second
	certPEM, err := s.authority.Sign([]byte(req.GetCsr()), caller.Identities, ttl)
	if err != nil {
		var se *pki.SignError
		if !errors.As(err, &se) {
			se = &pki.SignError{Kind: pki.KindCertGen, Err: err}
		}
		s.metrics.signErrors.WithLabelValues(se.Kind).Inc()
		code := codes.Internal
		switch se.Kind {
		case pki.KindCSR:
			s.metrics.csrParseErrors.Inc()
			code = codes.InvalidArgument
		case pki.KindTTL:
			code = codes.InvalidArgument
		}
		log.Warn("certificate request failed", "error_kind", se.Kind, "err", se.Err.Error())
		return nil, status.Errorf(code, "CSR signing error (%s): %v", se.Kind, se.Err)
	}
	s.metrics.issued.Inc()
	log.Debug("certificate issued", "requested_ttl", ttl)
	return &pb.IstioCertificateResponse{CertChain: s.authority.CertChain(certPEM)}, nil
}

// servingCert is the CA's own TLS certificate, issued by the CA with a key
// that stays in memory, and issued again once half its life has passed.
type servingCert struct {
	// Set at construction.
	authority *pki.Authority
	dnsNames  []string
	ttl       time.Duration
	now       func() time.Time
	// a failed renewal is logged (once per failing stretch) and counted
	log         *slog.Logger
	renewErrors prometheus.Counter

	// Guarded by mu.
	mu      sync.Mutex
	cert    *tls.Certificate
	renewAt time.Time
	failing bool // the last renewal failed (logged)
}

// get returns the current certificate, renewing it when due. A failed
// renewal keeps serving the old one while it is valid.
func (s *servingCert) get() (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if s.cert != nil && now.Before(s.renewAt) {
		return s.cert, nil
	}
	c, err := s.authority.IssueServing(s.dnsNames, s.ttl)
	if err != nil {
		s.renewErrors.Inc()
		if s.cert != nil && now.Before(s.cert.Leaf.NotAfter) {
			if !s.failing {
				s.log.Warn("serving certificate not renewed; serving the old one while it is valid", "err", err, "not_after", s.cert.Leaf.NotAfter)
			}
			s.failing = true
			return s.cert, nil
		}
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	if s.failing {
		s.log.Info("serving certificate renewed after failures")
	}
	s.failing = false
	s.cert = c
	s.renewAt = c.Leaf.NotBefore.Add(c.Leaf.NotAfter.Sub(c.Leaf.NotBefore) / 2)
	return c, nil
}

// tlsConfig serves the CA's certificate and asks for, without requiring,
// a client certificate that chains to the CA's roots (istio-agent
// presents its current one when it renews).
func (s *servingCert) tlsConfig() *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return s.get() },
		ClientAuth:     tls.VerifyClientCertIfGiven,
		ClientCAs:      s.authority.Roots(),
		NextProtos:     []string{"h2"},
	}
}
