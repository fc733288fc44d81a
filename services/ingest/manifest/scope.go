package manifest

// Scope says whether objects of a kind live in a namespace.
type Scope int

// Scopes.
const (
	// UnknownScope is any kind not listed here, typically a custom resource
	// whose CRD says the scope: its namespace is kept as written.
	UnknownScope Scope = iota
	// Namespaced kinds without a namespace get DefaultNamespace, as
	// kubectl apply would do.
	Namespaced
	// ClusterScoped kinds never have a namespace.
	ClusterScoped
)

// DefaultNamespace is given to namespaced objects that name none.
const DefaultNamespace = "default"

type groupKind struct{ group, kind string }

// clusterScoped lists the well-known cluster-scoped kinds.
var clusterScoped = map[groupKind]bool{
	{"", "Namespace"}:                                                    true,
	{"", "Node"}:                                                         true,
	{"", "PersistentVolume"}:                                             true,
	{"", "ComponentStatus"}:                                              true,
	{"rbac.authorization.k8s.io", "ClusterRole"}:                         true,
	{"rbac.authorization.k8s.io", "ClusterRoleBinding"}:                  true,
	{"apiextensions.k8s.io", "CustomResourceDefinition"}:                 true,
	{"apiregistration.k8s.io", "APIService"}:                             true,
	{"admissionregistration.k8s.io", "MutatingWebhookConfiguration"}:     true,
	{"admissionregistration.k8s.io", "ValidatingWebhookConfiguration"}:   true,
	{"admissionregistration.k8s.io", "ValidatingAdmissionPolicy"}:        true,
	{"admissionregistration.k8s.io", "ValidatingAdmissionPolicyBinding"}: true,
	{"admissionregistration.k8s.io", "MutatingAdmissionPolicy"}:          true,
	{"admissionregistration.k8s.io", "MutatingAdmissionPolicyBinding"}:   true,
	{"storage.k8s.io", "StorageClass"}:                                   true,
	{"storage.k8s.io", "CSIDriver"}:                                      true,
	{"storage.k8s.io", "CSINode"}:                                        true,
	{"storage.k8s.io", "VolumeAttachment"}:                               true,
	{"scheduling.k8s.io", "PriorityClass"}:                               true,
	{"networking.k8s.io", "IngressClass"}:                                true,
	{"networking.k8s.io", "IPAddress"}:                                   true,
	{"networking.k8s.io", "ServiceCIDR"}:                                 true,
	{"node.k8s.io", "RuntimeClass"}:                                      true,
	{"certificates.k8s.io", "CertificateSigningRequest"}:                 true,
	{"flowcontrol.apiserver.k8s.io", "FlowSchema"}:                       true,
	{"flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration"}:       true,
	{"gateway.networking.k8s.io", "GatewayClass"}:                        true,
}

// namespacedGroups are API groups whose every kind is namespaced.
var namespacedGroups = map[string]bool{
	"apps":                        true,
	"batch":                       true,
	"autoscaling":                 true,
	"discovery.k8s.io":            true,
	"policy":                      true,
	"coordination.k8s.io":         true,
	"events.k8s.io":               true,
	"networking.istio.io":         true,
	"security.istio.io":           true,
	"telemetry.istio.io":          true,
	"extensions.istio.io":         true,
	"gateway.networking.k8s.io":   true, // except GatewayClass, listed above
	"gateway.networking.x-k8s.io": true,
}

// namespacedKinds are namespaced kinds of groups that also hold
// cluster-scoped kinds.
var namespacedKinds = map[groupKind]bool{
	{"rbac.authorization.k8s.io", "Role"}:        true,
	{"rbac.authorization.k8s.io", "RoleBinding"}: true,
	{"networking.k8s.io", "Ingress"}:             true,
	{"networking.k8s.io", "NetworkPolicy"}:       true,
	{"storage.k8s.io", "CSIStorageCapacity"}:     true,
}

// ScopeOf returns the scope of a kind, or UnknownScope.
func ScopeOf(group, kind string) Scope {
	gk := groupKind{group, kind}
	switch {
	case clusterScoped[gk]:
		return ClusterScoped
	case group == "":
		// Every other core kind (Service, Endpoints, ConfigMap, Secret,
		// Pod, ServiceAccount, ...) is namespaced.
		return Namespaced
	case namespacedGroups[group], namespacedKinds[gk]:
		return Namespaced
	}
	return UnknownScope
}
