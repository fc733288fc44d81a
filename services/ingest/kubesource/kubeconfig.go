package kubesource

import (
	"errors"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// LoadKubeconfig reads a kubeconfig file and returns the client config of
// its current context. The file is trusted (an operator's flag), so exec
// and auth-provider plugins work as they do for kubectl.
func LoadKubeconfig(path string) (*rest.Config, error) {
	rules := &clientcmd.ClientConfigLoadingRules{ExplicitPath: path}
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}

// InClusterConfig is the config of the cluster ingest runs in (its pod's
// service account).
func InClusterConfig() (*rest.Config, error) {
	cfg, err := rest.InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("in-cluster config: %w", err)
	}
	return cfg, nil
}

// configFromSecret parses a kubeconfig held in a multicluster Secret. Such
// a kubeconfig is less trusted than a flag: whoever can write Secrets in the
// config cluster's namespace must not make ingest run programs (exec,
// auth-provider plugins) or read its local files (token, certificate and
// key paths), so those are refused. Embedded data and tokens work.
func configFromSecret(data []byte) (*rest.Config, error) {
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, err
	}
	if err := checkSecretKubeconfig(kc); err != nil {
		return nil, err
	}
	return clientcmd.NewDefaultClientConfig(*kc, &clientcmd.ConfigOverrides{}).ClientConfig()
}

func checkSecretKubeconfig(kc *clientcmdapi.Config) error {
	var errs []error
	for name, a := range kc.AuthInfos {
		if a.Exec != nil {
			errs = append(errs, fmt.Errorf("user %q: exec plugins are not allowed", name))
		}
		if a.AuthProvider != nil {
			errs = append(errs, fmt.Errorf("user %q: auth-provider plugins are not allowed", name))
		}
		if a.TokenFile != "" || a.ClientCertificate != "" || a.ClientKey != "" {
			errs = append(errs, fmt.Errorf("user %q: file references are not allowed (embed the data)", name))
		}
	}
	for name, c := range kc.Clusters {
		if c.CertificateAuthority != "" {
			errs = append(errs, fmt.Errorf("cluster %q: certificate-authority file references are not allowed (embed the data)", name))
		}
	}
	return errors.Join(errs...)
}
