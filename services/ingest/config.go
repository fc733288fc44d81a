package ingest

import (
	"errors"
	"time"

	"github.com/spf13/pflag"

	"github.com/pilotwire/pilotwire/pkg/svc"
)

// Defaults.
const (
	// DefaultHTTPAddr serves /healthz, /readyz and /metrics.
	DefaultHTTPAddr = "127.0.0.1:9091"
	// DefaultClusterID is Istio's default cluster id.
	DefaultClusterID = "Kubernetes"
	// DefaultFileDebounce is how long a manifest file must stay quiet
	// before it is read again.
	DefaultFileDebounce = 100 * time.Millisecond
)

// Config is the ingest service's configuration, read once by AddFlags.
type Config struct {
	svc.Common
	// ConfigDir is the directory of manifests to publish (--config-dir,
	// env PILOTWIRE_CONFIG_DIR; required).
	ConfigDir string
	// ClusterID is the cluster every record belongs to (--cluster-id, env
	// PILOTWIRE_CLUSTER_ID, default "Kubernetes"). One ingest owns one
	// cluster id: at start it deletes the cluster's objects its source lacks.
	ClusterID string
	// FileDebounce coalesces bursts of file events (--file-debounce, env
	// PILOTWIRE_FILE_DEBOUNCE, default 100ms).
	FileDebounce time.Duration
}

// AddFlags registers the service's flags on fs, defaults taken from the
// environment.
func (c *Config) AddFlags(fs *pflag.FlagSet) {
	c.Common.AddFlags(fs, DefaultHTTPAddr)
	fs.StringVar(&c.ConfigDir, "config-dir", svc.EnvString("PILOTWIRE_CONFIG_DIR", ""),
		"directory of Kubernetes manifests (*.yaml, *.yml, *.json, recursively) to publish (env PILOTWIRE_CONFIG_DIR)")
	fs.StringVar(&c.ClusterID, "cluster-id", svc.EnvString("PILOTWIRE_CLUSTER_ID", DefaultClusterID),
		"cluster id recorded with every object (env PILOTWIRE_CLUSTER_ID)")
	fs.DurationVar(&c.FileDebounce, "file-debounce", svc.EnvDuration("PILOTWIRE_FILE_DEBOUNCE", DefaultFileDebounce),
		"quiet time before a changed manifest file is read again (env PILOTWIRE_FILE_DEBOUNCE)")
}

// Validate reports configuration errors.
func (c *Config) Validate() error {
	var errs []error
	if c.ConfigDir == "" {
		errs = append(errs, errors.New("--config-dir (PILOTWIRE_CONFIG_DIR) is required"))
	}
	if c.ClusterID == "" {
		errs = append(errs, errors.New("--cluster-id must not be empty"))
	}
	if c.FileDebounce < 0 {
		errs = append(errs, errors.New("--file-debounce must not be negative"))
	}
	if _, err := c.Names(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
