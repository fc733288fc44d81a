package model

import (
	"slices"

	"github.com/pilotwire/pilotwire/pkg/spiffe"
)

// Workload identity, as Istio names it: a workload's service account
// becomes the SPIFFE identity spiffe://<trust domain>/ns/<ns>/sa/<sa>
// that its certificate carries (Istio's pkg/spiffe). A service's
// identities are those of its endpoints plus, for a ServiceEntry, its
// subjectAltNames (Istio's PushContext.ServiceAccounts).

// IstioTLSMode is the [TLSModeLabel] value of workloads with Istio's
// sidecar.
const IstioTLSMode = "istio"

// SpiffeIdentity is the SPIFFE identity of service account sa in
// namespace ns under trustDomain.
func SpiffeIdentity(trustDomain, ns, sa string) string {
	return spiffe.ID(trustDomain, ns, sa)
}

// deriveIdentity sets what s's config derives from its endpoints: its
// ServiceAccounts (keeping those already set, a ServiceEntry's
// subjectAltNames), and its sidecarPorts. Only for a service being built,
// before it is published.
func (s *Service) deriveIdentity(trustDomain string) {
	var buf [4]string
	names := buf[:0] // the endpoints' service accounts: a few, shared strings
	s.sidecarPorts = nil
	for _, p := range s.Ports {
		sidecars := len(p.Endpoints) > 0
		for i := range p.Endpoints {
			ep := &p.Endpoints[i]
			if sidecars && ep.TLSMode() != IstioTLSMode {
				sidecars = false
			}
			if sa := ep.ServiceAccount; sa != "" && !slices.Contains(names, sa) {
				names = append(names, sa)
			}
		}
		if sidecars {
			s.sidecarPorts = append(s.sidecarPorts, p.Port)
		}
	}
	out := s.ServiceAccounts
	for _, sa := range names {
		out = append(out, SpiffeIdentity(trustDomain, s.Namespace, sa))
	}
	if len(out) == 0 {
		s.ServiceAccounts = nil
		return
	}
	slices.Sort(out)
	s.ServiceAccounts = slices.Clip(slices.Compact(out))
}

// AllSidecars reports whether the service's port has endpoints and every
// one has Istio's sidecar (tlsMode istio): clients send Istio mTLS to a
// passthrough port (a headless service, resolution NONE) only then, as in
// Istio. Part of the service's config.
func (s *Service) AllSidecars(port int32) bool {
	_, ok := slices.BinarySearch(s.sidecarPorts, port)
	return ok
}
