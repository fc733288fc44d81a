package k8stest

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kubeconfigName names the cluster, user and context in the kubeconfig.
const kubeconfigName = "k8stest"

// writeKubeconfig writes cfg's server and client certificate as a
// kubeconfig file whose current context is "k8stest".
func writeKubeconfig(path string, cfg *rest.Config) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters[kubeconfigName] = &clientcmdapi.Cluster{
		Server:                   cfg.Host,
		CertificateAuthorityData: cfg.CAData,
	}
	kc.AuthInfos[kubeconfigName] = &clientcmdapi.AuthInfo{
		ClientCertificateData: cfg.CertData,
		ClientKeyData:         cfg.KeyData,
	}
	kc.Contexts[kubeconfigName] = &clientcmdapi.Context{
		Cluster:   kubeconfigName,
		AuthInfo:  kubeconfigName,
		Namespace: "default",
	}
	kc.CurrentContext = kubeconfigName
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
	}
	return nil
}
