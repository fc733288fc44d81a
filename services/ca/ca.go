package ca

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	pb "istio.io/api/security/v1alpha1"
	"k8s.io/client-go/kubernetes"

	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ca/pki"
)

// gracefulStop bounds how long in-flight requests may finish at shutdown.
const gracefulStop = 5 * time.Second

// Service is the CA: the certificate service and the root publisher.
type Service struct {
	// Set at construction, read-only after.
	cfg   Config
	deps  svc.Deps
	log   *slog.Logger
	ready chan struct{} // closed once serving and publishing

	// Set before ready is closed.
	grpcAddr  atomic.Value // string
	authority atomic.Pointer[pki.Authority]
}

// New builds the CA service; it does no I/O (Run does).
func New(cfg Config, d svc.Deps) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Service{cfg: cfg, deps: d, log: d.Log, ready: make(chan struct{})}, nil
}

// Run runs the CA with deps from the service shell until ctx ends.
func Run(ctx context.Context, cfg Config, d svc.Deps) error {
	s, err := New(cfg, d)
	if err != nil {
		return err
	}
	return s.Run(ctx)
}

// Ready is closed once the CA serves certificates and its root publisher
// has synced.
func (s *Service) Ready() <-chan struct{} { return s.ready }

// GRPCAddr is the certificate service's bound address (after Ready).
func (s *Service) GRPCAddr() string {
	addr, _ := s.grpcAddr.Load().(string)
	return addr
}

// Authority is the CA in use (after Ready).
func (s *Service) Authority() *pki.Authority { return s.authority.Load() }

// Run loads (or makes) the CA, serves the certificate service on the
// gRPC address and keeps istio-ca-root-cert published, until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	restCfg, err := s.cfg.restConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}
	store := &caStore{
		client: client, namespace: s.cfg.Namespace, org: s.cfg.trustDomain(),
		rootTTL: s.cfg.SelfSignedCACertTTL, rsaBits: s.cfg.CARSAKeySize,
		opts: pki.Options{DefaultTTL: s.cfg.WorkloadCertTTL, MaxTTL: s.cfg.MaxWorkloadCertTTL},
		log:  s.log,
	}
	s.deps.Health.SetNotReady("loading the CA")
	authority, source, err := store.load(ctx)
	if err != nil {
		return err
	}
	s.authority.Store(authority)
	s.log.Info("CA loaded", "source", source, "ca", authority, "trust_domain", s.cfg.trustDomain())
	m := newMetrics(s.deps.Reg)
	registerExpiry(s.deps.Reg, authority, source == sourcePlugin)

	serving := &servingCert{authority: authority, dnsNames: s.cfg.dnsNames(), ttl: s.cfg.MaxWorkloadCertTTL, now: time.Now, log: s.log, renewErrors: m.servingRenewErrors}
	if _, err := serving.get(); err != nil {
		return err
	}
	service := &certService{
		authority: authority,
		authenticators: []Authenticator{
			certAuthenticator{onNoID: m.idExtractErrors.Inc},
			&tokenAuthenticator{client: client, audiences: s.cfg.TokenAudiences, trustDomain: s.cfg.trustDomain(), clusterID: s.cfg.ClusterID},
		},
		metrics: m,
		log:     s.log,
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(serving.tlsConfig())))
	pb.RegisterIstioCertificateServiceServer(gs, service)
	lis, err := net.Listen("tcp", s.cfg.GRPCAddr)
	if err != nil {
		return fmt.Errorf("listen grpc %s: %w", s.cfg.GRPCAddr, err)
	}
	s.grpcAddr.Store(lis.Addr().String())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	publisher := &rootPublisher{client: client, rootPEM: string(authority.RootsPEM()), metrics: m, reg: s.deps.Reg, log: s.log}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	synced := make(chan struct{})
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := gs.Serve(lis); err != nil {
			errs <- fmt.Errorf("serve grpc %s: %w", lis.Addr(), err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := publisher.run(ctx, func() { close(synced) }); err != nil && ctx.Err() == nil {
			errs <- fmt.Errorf("publish %s: %w", RootCertConfigMap, err)
		}
	}()
	defer func() {
		stopGRPC(gs)
		cancel()
		wg.Wait()
	}()

	select {
	case <-synced:
		s.deps.Health.SetReady()
		close(s.ready)
		s.log.Info("CA ready", "grpc", lis.Addr().String(), "dns_names", s.cfg.dnsNames())
	case err := <-errs:
		return err
	case <-ctx.Done():
		return nil
	}
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
		return nil
	}
}

// stopGRPC lets in-flight requests finish for a while, then cuts them.
func stopGRPC(gs *grpc.Server) {
	done := make(chan struct{})
	go func() {
		gs.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(gracefulStop)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		gs.Stop()
		<-done
	}
}
