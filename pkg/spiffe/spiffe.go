// Package spiffe names workload identities as Istio does: SPIFFE IDs
// spiffe://<trust domain>/ns/<namespace>/sa/<service account>. It is
// shared by the model (the identities clusters and policies match) and the
// CA (the identities it issues), and imports nothing.
package spiffe

// DefaultTrustDomain is Istio's default trust domain.
const DefaultTrustDomain = "cluster.local"

// ID is the SPIFFE ID of a service account.
func ID(trustDomain, namespace, serviceAccount string) string {
	return "spiffe://" + trustDomain + "/ns/" + namespace + "/sa/" + serviceAccount
}
