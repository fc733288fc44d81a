package ca

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/pilotwire/pilotwire/pkg/spiffe"
	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ca/pki"
)

// Defaults.
const (
	// DefaultHTTPAddr serves /healthz, /readyz and /metrics.
	DefaultHTTPAddr = "127.0.0.1:9095"
	// DefaultGRPCAddr is istiod's secure gRPC port, where istio-agent asks
	// for certificates.
	DefaultGRPCAddr = ":15012"
	// DefaultNamespace holds the CA's Secrets (Istio's POD_NAMESPACE).
	DefaultNamespace = "istio-system"
	// DefaultTrustDomain is Istio's default trust domain.
	DefaultTrustDomain = spiffe.DefaultTrustDomain
	// DefaultClusterID is Istio's default cluster id.
	DefaultClusterID = "Kubernetes"
	// DefaultTokenAudience is the audience istio-agent's tokens carry
	// (Istio's TOKEN_AUDIENCES default).
	DefaultTokenAudience = "istio-ca"
	// IstiodDNSName is the name istio-agent dials by default
	// (istiod.istio-system.svc:15012): the serving certificate names it
	// so that agents configured for istiod accept pilotwire's CA.
	IstiodDNSName = "istiod.istio-system.svc"

	// kubeQPS and kubeBurst limit the API client (TokenReviews and the
	// root certificate ConfigMaps of every namespace).
	kubeQPS   = 50
	kubeBurst = 100
)

// Config is the CA service's configuration, read once by AddFlags. Each
// field with a flag names it and its env var; the defaults are
// DefaultConfig's. The CA uses no NATS: its keys never enter a stream.
type Config struct {
	svc.Common
	// GRPCAddr serves istio.v1.auth.IstioCertificateService over TLS
	// (--grpc-addr, env PILOTWIRE_CA_GRPC_ADDR, default :15012).
	GRPCAddr string
	// Kubeconfig is the cluster's kubeconfig file (--kubeconfig, env
	// PILOTWIRE_KUBECONFIG); InCluster uses the pod's service account
	// instead (--in-cluster, env PILOTWIRE_IN_CLUSTER). One is required:
	// the CA keeps its root in a Secret, reviews tokens and publishes
	// istio-ca-root-cert through the API server.
	Kubeconfig string
	InCluster  bool
	// Namespace holds istio-ca-secret and cacerts (--namespace, env
	// POD_NAMESPACE as Istio, default istio-system).
	Namespace string
	// TrustDomain is the SPIFFE trust domain of issued identities
	// (--trust-domain, env PILOTWIRE_TRUST_DOMAIN, default cluster.local;
	// Istio's meshConfig.trustDomain). An "@" becomes ".", as in Istio.
	TrustDomain string
	// ClusterID is this cluster's id (--cluster-id, env
	// PILOTWIRE_CLUSTER_ID, default Kubernetes): a caller that names
	// another cluster in its clusterid metadata is refused, since only
	// this cluster's API server can review its token.
	ClusterID string
	// TokenAudiences: a token must carry one of them
	// (--token-audiences, env TOKEN_AUDIENCES as Istio, comma-separated,
	// default istio-ca).
	TokenAudiences []string
	// DNSNames are the serving certificate's names (--dns-name,
	// repeatable; env PILOTWIRE_CA_DNS_NAMES, comma-separated; default
	// istiod.istio-system.svc and pilotwire-ca.<namespace>.svc).
	DNSNames []string
	// WorkloadCertTTL is an issued certificate's lifetime when the request
	// asks none (--workload-cert-ttl, env DEFAULT_WORKLOAD_CERT_TTL as
	// Istio, default 24h).
	WorkloadCertTTL time.Duration
	// MaxWorkloadCertTTL is the longest lifetime a request may ask; a
	// longer one is refused (--max-workload-cert-ttl, env
	// MAX_WORKLOAD_CERT_TTL as Istio, default 2160h, 90 days).
	MaxWorkloadCertTTL time.Duration
	// SelfSignedCACertTTL is the lifetime of a root the CA makes itself
	// (--self-signed-ca-cert-ttl, env CITADEL_SELF_SIGNED_CA_CERT_TTL as
	// Istio, default 87600h, ten years).
	SelfSignedCACertTTL time.Duration
	// CARSAKeySize is the RSA key size of a root the CA makes itself
	// (--ca-rsa-key-size, env CITADEL_SELF_SIGNED_CA_RSA_KEY_SIZE as
	// Istio, default 2048).
	CARSAKeySize int
}

// DefaultConfig is the configuration every flag defaults to.
func DefaultConfig() Config {
	return Config{
		Common:              svc.DefaultCommon(DefaultHTTPAddr),
		GRPCAddr:            DefaultGRPCAddr,
		Namespace:           DefaultNamespace,
		TrustDomain:         DefaultTrustDomain,
		ClusterID:           DefaultClusterID,
		TokenAudiences:      []string{DefaultTokenAudience},
		WorkloadCertTTL:     pki.DefaultWorkloadCertTTL,
		MaxWorkloadCertTTL:  pki.DefaultMaxWorkloadCertTTL,
		SelfSignedCACertTTL: pki.DefaultRootTTL,
		CARSAKeySize:        pki.DefaultRootRSABits,
	}
}

// AddFlags registers the CA's flags on fs, each defaulting to
// DefaultConfig's value unless its environment variable is set.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	d := DefaultConfig()
	c.Common.AddLocalFlags(fs, d.Common)
	fs.StringVar(&c.GRPCAddr, "grpc-addr", svc.EnvString("PILOTWIRE_CA_GRPC_ADDR", d.GRPCAddr),
		"address of the certificate service (istio.v1.auth.IstioCertificateService, TLS) (env PILOTWIRE_CA_GRPC_ADDR)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", svc.EnvString("PILOTWIRE_KUBECONFIG", d.Kubeconfig),
		"kubeconfig of the cluster (env PILOTWIRE_KUBECONFIG)")
	fs.BoolVar(&c.InCluster, "in-cluster", svc.EnvBool("PILOTWIRE_IN_CLUSTER", d.InCluster),
		"use the cluster the CA runs in, through its pod's service account (env PILOTWIRE_IN_CLUSTER)")
	fs.StringVar(&c.Namespace, "namespace", svc.EnvString("POD_NAMESPACE", d.Namespace),
		"namespace of the CA's Secrets istio-ca-secret and cacerts (env POD_NAMESPACE)")
	fs.StringVar(&c.TrustDomain, "trust-domain", svc.EnvString("PILOTWIRE_TRUST_DOMAIN", d.TrustDomain),
		"SPIFFE trust domain of issued identities (env PILOTWIRE_TRUST_DOMAIN)")
	fs.StringVar(&c.ClusterID, "cluster-id", svc.EnvString("PILOTWIRE_CLUSTER_ID", d.ClusterID),
		"id of this cluster; callers naming another in their clusterid metadata are refused (env PILOTWIRE_CLUSTER_ID)")
	fs.StringSliceVar(&c.TokenAudiences, "token-audiences", svc.EnvList("TOKEN_AUDIENCES", d.TokenAudiences),
		"audiences a caller's service-account token must carry one of, comma-separated (env TOKEN_AUDIENCES)")
	fs.StringArrayVar(&c.DNSNames, "dns-name", svc.EnvList("PILOTWIRE_CA_DNS_NAMES", d.DNSNames),
		"DNS name of the serving certificate; repeatable (env PILOTWIRE_CA_DNS_NAMES, comma-separated; default "+IstiodDNSName+" and pilotwire-ca.<namespace>.svc)")
	fs.DurationVar(&c.WorkloadCertTTL, "workload-cert-ttl", svc.EnvDuration("DEFAULT_WORKLOAD_CERT_TTL", d.WorkloadCertTTL),
		"lifetime of an issued certificate when the request asks none (env DEFAULT_WORKLOAD_CERT_TTL)")
	fs.DurationVar(&c.MaxWorkloadCertTTL, "max-workload-cert-ttl", svc.EnvDuration("MAX_WORKLOAD_CERT_TTL", d.MaxWorkloadCertTTL),
		"longest lifetime a request may ask; longer requests are refused (env MAX_WORKLOAD_CERT_TTL)")
	fs.DurationVar(&c.SelfSignedCACertTTL, "self-signed-ca-cert-ttl", svc.EnvDuration("CITADEL_SELF_SIGNED_CA_CERT_TTL", d.SelfSignedCACertTTL),
		"lifetime of a root the CA makes itself (env CITADEL_SELF_SIGNED_CA_CERT_TTL)")
	fs.IntVar(&c.CARSAKeySize, "ca-rsa-key-size", svc.EnvInt("CITADEL_SELF_SIGNED_CA_RSA_KEY_SIZE", d.CARSAKeySize),
		"RSA key size of a root the CA makes itself (env CITADEL_SELF_SIGNED_CA_RSA_KEY_SIZE)")
}

// Validate reports configuration errors.
func (c *Config) Validate() error {
	var errs []error
	switch {
	case c.Kubeconfig == "" && !c.InCluster:
		errs = append(errs, errors.New("no cluster: set --kubeconfig (PILOTWIRE_KUBECONFIG) or --in-cluster (PILOTWIRE_IN_CLUSTER)"))
	case c.Kubeconfig != "" && c.InCluster:
		errs = append(errs, errors.New("--kubeconfig and --in-cluster both name the cluster; set one"))
	}
	if _, _, err := net.SplitHostPort(c.GRPCAddr); err != nil {
		errs = append(errs, fmt.Errorf("--grpc-addr %q: %w", c.GRPCAddr, err))
	}
	if c.Namespace == "" {
		errs = append(errs, errors.New("--namespace must not be empty"))
	}
	if c.trustDomain() == "" || strings.ContainsAny(c.trustDomain(), "/:") {
		errs = append(errs, fmt.Errorf("--trust-domain %q: want a name such as cluster.local", c.TrustDomain))
	}
	if len(c.TokenAudiences) == 0 {
		errs = append(errs, errors.New("--token-audiences must name at least one audience"))
	}
	if c.WorkloadCertTTL <= 0 || c.MaxWorkloadCertTTL <= 0 || c.SelfSignedCACertTTL <= 0 {
		errs = append(errs, errors.New("--workload-cert-ttl, --max-workload-cert-ttl and --self-signed-ca-cert-ttl must be positive"))
	}
	if c.WorkloadCertTTL > c.MaxWorkloadCertTTL {
		errs = append(errs, fmt.Errorf("--workload-cert-ttl %s is over --max-workload-cert-ttl %s", c.WorkloadCertTTL, c.MaxWorkloadCertTTL))
	}
	if c.CARSAKeySize < pki.DefaultRootRSABits {
		errs = append(errs, fmt.Errorf("--ca-rsa-key-size %d is under %d", c.CARSAKeySize, pki.DefaultRootRSABits))
	}
	return errors.Join(errs...)
}

// trustDomain is the trust domain as it appears in SPIFFE ids: Istio
// turns "@" into ".".
func (c *Config) trustDomain() string { return strings.ReplaceAll(c.TrustDomain, "@", ".") }

// dnsNames are the serving certificate's names.
func (c *Config) dnsNames() []string {
	if len(c.DNSNames) > 0 {
		return c.DNSNames
	}
	return []string{IstiodDNSName, "pilotwire-ca." + c.Namespace + ".svc"}
}

// restConfig is the API client's config.
func (c *Config) restConfig() (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if c.InCluster {
		if cfg, err = rest.InClusterConfig(); err != nil {
			return nil, fmt.Errorf("in-cluster config: %w", err)
		}
	} else {
		rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: c.Kubeconfig}
		if cfg, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig(); err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", c.Kubeconfig, err)
		}
	}
	cfg.QPS, cfg.Burst = kubeQPS, kubeBurst
	cfg.UserAgent = "pilotwire-ca"
	return cfg, nil
}
