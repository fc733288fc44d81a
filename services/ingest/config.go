package ingest

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/lease"
	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ingest/filesource"
	"github.com/pilotwire/pilotwire/services/ingest/kubesource"
	"github.com/pilotwire/pilotwire/services/ingest/manifest"
	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

// Defaults.
const (
	// DefaultHTTPAddr serves /healthz, /readyz and /metrics.
	DefaultHTTPAddr = "127.0.0.1:9091"
	// DefaultClusterID is Istio's default cluster id.
	DefaultClusterID = "Kubernetes"
	// DefaultFileDebounce is how long a manifest file must stay quiet
	// before it is read again.
	DefaultFileDebounce = filesource.DefaultQuiet
	// DefaultMassDeleteThreshold: a sync that would delete more than this
	// share of a cluster's live objects deletes nothing.
	DefaultMassDeleteThreshold = 0.5
	// DefaultKubeClientQPS and DefaultKubeClientBurst limit each cluster's
	// API clients.
	DefaultKubeClientQPS   = 50
	DefaultKubeClientBurst = 100
)

// Config is the ingest service's configuration, read once by AddFlags. Each
// field with a flag names it and its env var; the defaults are
// DefaultConfig's.
//
// Sources: the file source runs when ConfigDir is set; the Kubernetes
// source runs when Kubeconfig, InCluster or Clusters is set. Both may run
// at once, each owning its own cluster ids.
type Config struct {
	svc.Common
	// ConfigDir is the directory of manifests to publish (--config-dir,
	// env PILOTWIRE_CONFIG_DIR).
	ConfigDir string
	// ClusterID is the config cluster's id (--cluster-id, env
	// PILOTWIRE_CLUSTER_ID, default "Kubernetes", Istio's CLUSTER_ID): the
	// cluster of --kubeconfig or --in-cluster, and of the file source
	// unless FileClusterID says otherwise. Whoever owns a cluster id
	// deletes, at start, that cluster's objects its source lacks.
	ClusterID string
	// FileClusterID is the file source's cluster id (--file-cluster-id, env
	// PILOTWIRE_FILE_CLUSTER_ID, default ClusterID). It must differ from
	// every Kubernetes cluster id when both sources run.
	FileClusterID string
	// FileDebounce coalesces bursts of file events (--file-debounce, env
	// PILOTWIRE_FILE_DEBOUNCE, default 25ms).
	FileDebounce time.Duration

	// Kubeconfig is the config cluster's kubeconfig file (--kubeconfig, env
	// PILOTWIRE_KUBECONFIG; its current context is used).
	Kubeconfig string
	// InCluster makes the cluster ingest runs in the config cluster, through
	// its pod's service account (--in-cluster, env PILOTWIRE_IN_CLUSTER).
	InCluster bool
	// Clusters are more clusters, each "ID=KUBECONFIG" (--cluster,
	// repeatable; env PILOTWIRE_CLUSTERS, comma-separated).
	Clusters []string
	// ClusterSecretsNamespace is where the config cluster's multicluster
	// Secrets (label istio/multiCluster=true, one kubeconfig per data key
	// named by cluster id) are watched (--cluster-secrets-namespace, env
	// PILOTWIRE_CLUSTER_SECRETS_NAMESPACE, default istio-system; "" turns
	// it off).
	ClusterSecretsNamespace string
	// EnableGatewayAPI watches the Kubernetes Gateway API kinds
	// (--enable-gateway-api, env PILOT_ENABLE_GATEWAY_API, default true)
	// and writes their status: the writer of a config cluster's lease
	// computes the Gateway, listener and route conditions
	// (pkg/gatewayapi) and writes those that changed.
	EnableGatewayAPI bool
	// GatewayStatusDebounce is how long the status writer gathers changes
	// before it writes (--gateway-status-debounce, env
	// PILOTWIRE_GATEWAY_STATUS_DEBOUNCE, default 1s; negative: never write
	// status).
	GatewayStatusDebounce time.Duration
	// ClusterSyncTimeout is how long readiness waits for a cluster to sync
	// (--cluster-sync-timeout, env PILOT_REMOTE_CLUSTER_TIMEOUT, default
	// 30s). A cluster that misses it is reported and keeps trying.
	ClusterSyncTimeout time.Duration
	// KubeClientQPS and KubeClientBurst limit each cluster's API clients
	// (--kube-client-qps, env PILOTWIRE_KUBE_CLIENT_QPS, default 50;
	// --kube-client-burst, env PILOTWIRE_KUBE_CLIENT_BURST, default 100).
	KubeClientQPS   float32
	KubeClientBurst int
	// KubeClientCompression asks the API servers to gzip what they send
	// (--kube-client-compression, env PILOTWIRE_KUBE_CLIENT_COMPRESSION,
	// default false; see kubesource.Options.ClientCompression).
	KubeClientCompression bool

	// MassDeleteThreshold guards the syncs (start, a cluster's initial
	// list, a removed cluster): one that would delete more than this
	// fraction of a cluster's live objects (and more than 10) publishes
	// its adds and updates but no deletes, logged and counted
	// (--mass-delete-threshold, env PILOTWIRE_MASS_DELETE_THRESHOLD,
	// default 0.5; 1 turns the guard off).
	MassDeleteThreshold float64

	// ID names this instance in the writer leases (--id, env
	// PILOTWIRE_INSTANCE_ID; default ingest-<hostname>-<random>). Each
	// cluster id has one active writer at a time, the holder of its lease;
	// other instances stand by (and are ready).
	ID string
	// LeaseTTL: a standby takes over a cluster id whose writer has not
	// renewed its lease for this long (--lease-ttl, env
	// PILOTWIRE_LEASE_TTL, default 3s).
	LeaseTTL time.Duration
}

// DefaultConfig is the configuration every flag defaults to.
func DefaultConfig() Config {
	return Config{
		Common:                  svc.DefaultCommon(DefaultHTTPAddr),
		ClusterID:               DefaultClusterID,
		FileDebounce:            DefaultFileDebounce,
		ClusterSecretsNamespace: kubesource.DefaultSecretNamespace,
		EnableGatewayAPI:        true,
		GatewayStatusDebounce:   kubesource.DefaultGatewayStatusDebounce,
		ClusterSyncTimeout:      kubesource.DefaultSyncTimeout,
		KubeClientQPS:           DefaultKubeClientQPS,
		KubeClientBurst:         DefaultKubeClientBurst,
		LeaseTTL:                lease.DefaultTTL,
		MassDeleteThreshold:     DefaultMassDeleteThreshold,
	}
}

// AddFlags registers ingest's flags on fs, each defaulting to
// DefaultConfig's value unless its environment variable is set.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	d := DefaultConfig()
	c.Common.AddFlags(fs, d.Common)
	fs.StringVar(&c.ConfigDir, "config-dir", svc.EnvString("PILOTWIRE_CONFIG_DIR", d.ConfigDir),
		"directory of Kubernetes manifests (*.yaml, *.yml, *.json, recursively) to publish (env PILOTWIRE_CONFIG_DIR)")
	fs.StringVar(&c.ClusterID, "cluster-id", svc.EnvString("PILOTWIRE_CLUSTER_ID", d.ClusterID),
		"id of the config cluster (--kubeconfig, --in-cluster), and of the file source unless --file-cluster-id (env PILOTWIRE_CLUSTER_ID)")
	fs.StringVar(&c.FileClusterID, "file-cluster-id", svc.EnvString("PILOTWIRE_FILE_CLUSTER_ID", d.FileClusterID),
		"cluster id of the file source's objects (default --cluster-id) (env PILOTWIRE_FILE_CLUSTER_ID)")
	fs.DurationVar(&c.FileDebounce, "file-debounce", svc.EnvDuration("PILOTWIRE_FILE_DEBOUNCE", d.FileDebounce),
		"quiet time before a changed manifest file is read again (env PILOTWIRE_FILE_DEBOUNCE)")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", svc.EnvString("PILOTWIRE_KUBECONFIG", d.Kubeconfig),
		"kubeconfig of the config cluster, whose id is --cluster-id (env PILOTWIRE_KUBECONFIG)")
	fs.BoolVar(&c.InCluster, "in-cluster", svc.EnvBool("PILOTWIRE_IN_CLUSTER", d.InCluster),
		"watch the cluster ingest runs in, as the config cluster (env PILOTWIRE_IN_CLUSTER)")
	fs.StringArrayVar(&c.Clusters, "cluster", svc.EnvList("PILOTWIRE_CLUSTERS", d.Clusters),
		"another cluster to watch, as ID=KUBECONFIG; repeatable (env PILOTWIRE_CLUSTERS, comma-separated)")
	fs.StringVar(&c.ClusterSecretsNamespace, "cluster-secrets-namespace", svc.EnvString("PILOTWIRE_CLUSTER_SECRETS_NAMESPACE", d.ClusterSecretsNamespace),
		`namespace of the config cluster's multicluster Secrets (label istio/multiCluster=true); "" to ignore them (env PILOTWIRE_CLUSTER_SECRETS_NAMESPACE)`)
	fs.BoolVar(&c.EnableGatewayAPI, "enable-gateway-api", svc.EnvBool("PILOT_ENABLE_GATEWAY_API", d.EnableGatewayAPI),
		"watch the Kubernetes Gateway API kinds (env PILOT_ENABLE_GATEWAY_API)")
	fs.DurationVar(&c.GatewayStatusDebounce, "gateway-status-debounce", svc.EnvDuration("PILOTWIRE_GATEWAY_STATUS_DEBOUNCE", d.GatewayStatusDebounce),
		"quiet time the Gateway API status writer gathers changes for before writing; negative: never write status (env PILOTWIRE_GATEWAY_STATUS_DEBOUNCE)")
	fs.DurationVar(&c.ClusterSyncTimeout, "cluster-sync-timeout", svc.EnvDuration("PILOT_REMOTE_CLUSTER_TIMEOUT", d.ClusterSyncTimeout),
		"how long readiness waits for a cluster to sync; a cluster that misses it is reported and keeps trying (env PILOT_REMOTE_CLUSTER_TIMEOUT)")
	fs.Float32Var(&c.KubeClientQPS, "kube-client-qps", float32(svc.EnvInt("PILOTWIRE_KUBE_CLIENT_QPS", int(d.KubeClientQPS))),
		"queries per second of each cluster's API clients (env PILOTWIRE_KUBE_CLIENT_QPS)")
	fs.IntVar(&c.KubeClientBurst, "kube-client-burst", svc.EnvInt("PILOTWIRE_KUBE_CLIENT_BURST", d.KubeClientBurst),
		"burst of each cluster's API clients (env PILOTWIRE_KUBE_CLIENT_BURST)")
	fs.BoolVar(&c.KubeClientCompression, "kube-client-compression", svc.EnvBool("PILOTWIRE_KUBE_CLIENT_COMPRESSION", d.KubeClientCompression),
		"ask the API servers to gzip lists and watches: less traffic, more CPU on both ends; for clusters behind slow links (env PILOTWIRE_KUBE_CLIENT_COMPRESSION)")
	fs.Float64Var(&c.MassDeleteThreshold, "mass-delete-threshold", envFloat("PILOTWIRE_MASS_DELETE_THRESHOLD", d.MassDeleteThreshold),
		"a sync (start, a cluster's initial list, a removed cluster) that would delete more than this fraction of a cluster's live objects (and more than 10) deletes nothing; 1 turns the guard off (env PILOTWIRE_MASS_DELETE_THRESHOLD)")
	fs.StringVar(&c.ID, "id", svc.EnvString("PILOTWIRE_INSTANCE_ID", d.ID),
		"unique id of this instance in the writer leases (env PILOTWIRE_INSTANCE_ID; default ingest-<hostname>-<random>)")
	fs.DurationVar(&c.LeaseTTL, "lease-ttl", svc.EnvDuration("PILOTWIRE_LEASE_TTL", d.LeaseTTL),
		"a standby takes over a cluster id whose writer has not renewed its lease for this long (env PILOTWIRE_LEASE_TTL)")
}

// FileSource reports whether the file source runs.
func (c *Config) FileSource() bool { return c.ConfigDir != "" }

// KubeSource reports whether the Kubernetes source runs.
func (c *Config) KubeSource() bool { return c.Kubeconfig != "" || c.InCluster || len(c.Clusters) > 0 }

// ConfigClusterSet reports whether a config cluster (--kubeconfig or
// --in-cluster) is named.
func (c *Config) ConfigClusterSet() bool { return c.Kubeconfig != "" || c.InCluster }

// fileClusterID is the file source's cluster id.
func (c *Config) fileClusterID() string {
	if c.FileClusterID != "" {
		return c.FileClusterID
	}
	return c.ClusterID
}

// KubeCluster is one --cluster flag, parsed.
type KubeCluster struct {
	ID         string
	Kubeconfig string
}

// KubeClusters parses the --cluster flags.
func (c *Config) KubeClusters() ([]KubeCluster, error) {
	var out []KubeCluster
	var errs []error
	for _, s := range c.Clusters {
		id, path, ok := strings.Cut(s, "=")
		id, path = strings.TrimSpace(id), strings.TrimSpace(path)
		if !ok || id == "" || path == "" {
			errs = append(errs, fmt.Errorf("--cluster %q: want ID=KUBECONFIG", s))
			continue
		}
		out = append(out, KubeCluster{ID: id, Kubeconfig: path})
	}
	return out, errors.Join(errs...)
}

// Validate reports configuration errors.
func (c *Config) Validate() error {
	var errs []error
	if !c.FileSource() && !c.KubeSource() {
		errs = append(errs, errors.New("no source: set --config-dir (PILOTWIRE_CONFIG_DIR), or --kubeconfig, --in-cluster or --cluster, or both"))
	}
	if c.ClusterID == "" {
		errs = append(errs, errors.New("--cluster-id must not be empty"))
	}
	if c.FileDebounce < 0 {
		errs = append(errs, errors.New("--file-debounce must not be negative"))
	}
	if c.Kubeconfig != "" && c.InCluster {
		errs = append(errs, errors.New("--kubeconfig and --in-cluster both name the config cluster; set one"))
	}
	if c.MassDeleteThreshold < 0 {
		errs = append(errs, errors.New("--mass-delete-threshold must not be negative"))
	}
	if c.LeaseTTL < 0 {
		errs = append(errs, errors.New("--lease-ttl must not be negative"))
	}
	if c.ClusterSyncTimeout < 0 {
		errs = append(errs, errors.New("--cluster-sync-timeout must not be negative"))
	}
	clusters, err := c.KubeClusters()
	if err != nil {
		errs = append(errs, err)
	}
	// Every cluster id has one owner.
	owner := make(map[string]string)
	claim := func(id, who string) {
		if prev, ok := owner[id]; ok {
			errs = append(errs, fmt.Errorf("cluster id %q is claimed by both %s and %s (ids must be unique; see --file-cluster-id)", id, prev, who))
			return
		}
		owner[id] = who
	}
	if c.FileSource() {
		claim(c.fileClusterID(), "the file source")
	}
	if c.ConfigClusterSet() {
		claim(c.ClusterID, "the config cluster (--kubeconfig/--in-cluster)")
	}
	for _, kc := range clusters {
		claim(kc.ID, "--cluster "+kc.ID)
	}
	if _, err := c.Names(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// kubeClusters loads the static clusters' configs (reads the kubeconfig
// files).
func (c *Config) kubeClusters() ([]kubesource.ClusterConfig, error) {
	var out []kubesource.ClusterConfig
	qps, burst := c.kubeQPS(), c.kubeBurst()
	limit := func(kc kubesource.ClusterConfig) kubesource.ClusterConfig {
		kc.Config.QPS, kc.Config.Burst = qps, burst
		return kc
	}
	switch {
	case c.Kubeconfig != "":
		cfg, err := kubesource.LoadKubeconfig(c.Kubeconfig)
		if err != nil {
			return nil, err
		}
		out = append(out, limit(kubesource.ClusterConfig{ID: c.ClusterID, Config: cfg, Origin: kubesource.OriginFlag}))
	case c.InCluster:
		cfg, err := kubesource.InClusterConfig()
		if err != nil {
			return nil, err
		}
		out = append(out, limit(kubesource.ClusterConfig{ID: c.ClusterID, Config: cfg, Origin: kubesource.OriginInCluster}))
	}
	clusters, err := c.KubeClusters()
	if err != nil {
		return nil, err
	}
	for _, kc := range clusters {
		cfg, err := kubesource.LoadKubeconfig(kc.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("--cluster %s: %w", kc.ID, err)
		}
		out = append(out, limit(kubesource.ClusterConfig{ID: kc.ID, Config: cfg, Origin: kubesource.OriginFlag}))
	}
	return out, nil
}

// publishOptions is the template of every publisher's options.
func (c *Config) publishOptions(names bus.Names) publish.Options {
	return publish.Options{
		Names:               names,
		Stream:              c.StreamOptions(),
		MassDeleteThreshold: c.MassDeleteThreshold,
		MassDeleteOverride:  "set --mass-delete-threshold=1 (PILOTWIRE_MASS_DELETE_THRESHOLD) to allow it",
		Records:             manifest.Recorded,
	}
}

// kubeQPS and kubeBurst are the client limits, DefaultConfig's when unset.
func (c *Config) kubeQPS() float32 {
	if c.KubeClientQPS > 0 {
		return c.KubeClientQPS
	}
	return DefaultConfig().KubeClientQPS
}

func (c *Config) kubeBurst() int {
	if c.KubeClientBurst > 0 {
		return c.KubeClientBurst
	}
	return DefaultConfig().KubeClientBurst
}

// envFloat returns the environment variable name as a float, or def when
// unset or invalid (an invalid value is reported on stderr once at
// start-up), as pkg/svc's Env helpers do.
func envFloat(name string, def float64) float64 {
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return def
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "ignoring %s=%q: %v\n", name, v, err)
		return def
	}
	return f
}
