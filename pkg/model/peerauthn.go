package model

import (
	"cmp"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	securityv1 "istio.io/api/security/v1"
)

// PeerAuthentication (security.istio.io, v1 or v1beta1: one schema)
// resolved as Istio resolves it (pilot's authn policy applier and its
// AuthenticationPolicies):
//   - a policy without a selector is the mesh's in the root namespace and
//     its namespace's elsewhere; of several, the oldest applies, the others
//     are reported and ignored;
//   - a policy with a selector applies to the workloads of its namespace it
//     selects (the oldest of several); in the root namespace it applies to
//     no one, as in Istio;
//   - mesh, then namespace, then workload: each mode that is set overrides
//     the one before, UNSET inherits, and without any the mode is
//     PERMISSIVE; the workload policy's portLevelMtls overrides the mode
//     on those (target) ports, an UNSET entry taking the workload's mode.
//
// Clients (auto mTLS) read only the mesh and namespace policies of a
// destination's namespace ([Service.MTLSMode], Istio's
// BestEffortInferServiceMTLSMode): a workload policy that disables mTLS
// needs a DestinationRule with tls DISABLE on its clients, as in Istio.

// GroupSecurity is the API group of Istio's security config, and
// KindPeerAuthentication the kind of its PeerAuthentication.
const (
	GroupSecurity          = "security.istio.io"
	KindPeerAuthentication = "PeerAuthentication"
)

func (k ObjectKey) isPeerAuthentication() bool {
	return k.Group == GroupSecurity && k.Kind == KindPeerAuthentication
}

// MTLSMode is the mutual TLS mode of a workload's inbound side.
type MTLSMode uint8

// MTLS modes. The zero value is PERMISSIVE, Istio's default.
const (
	// MTLSPermissive accepts mTLS and plaintext.
	MTLSPermissive MTLSMode = iota
	// MTLSStrict accepts mTLS only.
	MTLSStrict
	// MTLSDisable accepts plaintext only.
	MTLSDisable
)

func (m MTLSMode) String() string {
	switch m {
	case MTLSPermissive:
		return "PERMISSIVE"
	case MTLSStrict:
		return "STRICT"
	case MTLSDisable:
		return "DISABLE"
	}
	return "MTLSMode(" + strconv.Itoa(int(m)) + ")"
}

// modeOf converts a set mode; ok is false for UNSET (and unknown values).
func modeOf(m securityv1.PeerAuthentication_MutualTLS_Mode) (MTLSMode, bool) {
	switch m {
	case securityv1.PeerAuthentication_MutualTLS_PERMISSIVE:
		return MTLSPermissive, true
	case securityv1.PeerAuthentication_MutualTLS_STRICT:
		return MTLSStrict, true
	case securityv1.PeerAuthentication_MutualTLS_DISABLE:
		return MTLSDisable, true
	}
	return MTLSPermissive, false
}

// PeerAuthn is the PeerAuthentication that applies to one workload. The
// zero value is Istio's default: PERMISSIVE on every port.
type PeerAuthn struct {
	// Mode applies to every port but those of PortModes.
	Mode MTLSMode
	// PortModes are the workload policy's port-level modes, by the port
	// the workload listens on (the endpoint's target port). Read-only.
	PortModes map[uint32]MTLSMode
}

// ForPort is the mode on target port p.
func (a PeerAuthn) ForPort(p uint32) MTLSMode {
	if m, ok := a.PortModes[p]; ok {
		return m
	}
	return a.Mode
}

// Key names the policy: two PeerAuthns with the same key are equal.
func (a PeerAuthn) Key() string {
	if len(a.PortModes) == 0 {
		return a.Mode.String()
	}
	var b strings.Builder
	b.WriteString(a.Mode.String())
	for _, p := range slices.Sorted(maps.Keys(a.PortModes)) {
		b.WriteString("," + strconv.Itoa(int(p)) + "=" + a.PortModes[p].String())
	}
	return b.String()
}

// storedPeerAuthn is one PeerAuthentication as stored.
type storedPeerAuthn struct {
	key     ObjectKey
	created time.Time
	spec    *securityv1.PeerAuthentication
}

// peerPolicy is one PeerAuthentication as it applies: its mode (set: false
// for UNSET) and valid port-level modes (set: false inherits).
type peerPolicy struct {
	object   string
	selector map[string]string // nil: a mesh or namespace policy
	mode     MTLSMode
	set      bool
	ports    map[uint32]portMode
}

type portMode struct {
	mode MTLSMode
	set  bool
}

// peerIndex holds the PeerAuthentications that apply.
type peerIndex struct {
	root string
	// mesh is the root namespace's policy without selector, or nil;
	// byNS each other namespace's.
	mesh *peerPolicy
	byNS map[string]*peerPolicy
	// workloads are each namespace's policies with a selector, oldest
	// first (not in the root namespace: those apply to no one).
	workloads map[string][]*peerPolicy
	problems  []Problem
}

// emptyPeers is the index without policies.
var emptyPeers = &peerIndex{}

func buildPeerIndex(stored []*storedPeerAuthn, root string) *peerIndex {
	if len(stored) == 0 {
		return emptyPeers
	}
	// Oldest first; ties by name, then namespace, as Istio orders them.
	slices.SortFunc(stored, func(a, b *storedPeerAuthn) int {
		return cmp.Or(a.created.Compare(b.created), strings.Compare(a.key.Name, b.key.Name),
			strings.Compare(a.key.Namespace, b.key.Namespace), strings.Compare(a.key.Cluster, b.key.Cluster))
	})
	x := &peerIndex{root: root, byNS: make(map[string]*peerPolicy), workloads: make(map[string][]*peerPolicy)}
	for _, st := range stored {
		obj := objectName(st.key)
		spec := st.spec
		// Ignoring a STRICT part lets plaintext in: an error.
		report := func(why string, mode securityv1.PeerAuthentication_MutualTLS_Mode) {
			sev := SeverityWarning
			if mode == securityv1.PeerAuthentication_MutualTLS_STRICT {
				sev = SeverityError
			}
			x.problems = append(x.problems, Problem{Object: obj, Reason: why, Severity: sev})
		}
		strictPorts := securityv1.PeerAuthentication_MutualTLS_UNSET
		for _, m := range spec.GetPortLevelMtls() {
			if m.GetMode() == securityv1.PeerAuthentication_MutualTLS_STRICT {
				strictPorts = m.GetMode()
			}
		}
		p := &peerPolicy{object: obj}
		p.mode, p.set = modeOf(spec.GetMtls().GetMode())
		if sel := spec.GetSelector().GetMatchLabels(); len(sel) > 0 {
			p.selector = sel
		}
		if p.selector == nil {
			if len(spec.GetPortLevelMtls()) > 0 {
				report("portLevelMtls needs a selector (a mesh or namespace policy cannot have one): ignored", strictPorts)
			}
			ns := st.key.Namespace
			first := x.byNS[ns]
			if ns == root {
				first = x.mesh
			}
			if first != nil {
				report("namespace already has a PeerAuthentication without selector ("+first.object+"): ignored", spec.GetMtls().GetMode())
				continue
			}
			if ns == root {
				x.mesh = p
			} else {
				x.byNS[ns] = p
			}
			continue
		}
		if st.key.Namespace == root {
			report("a PeerAuthentication with a selector in the root namespace "+root+" applies to no workload: ignored", max(spec.GetMtls().GetMode(), strictPorts))
			continue
		}
		for port, m := range spec.GetPortLevelMtls() {
			if port == 0 || port > 65535 {
				report("portLevelMtls: port "+strconv.FormatUint(uint64(port), 10)+" is not in 1..65535: ignored", m.GetMode())
				continue
			}
			if p.ports == nil {
				p.ports = make(map[uint32]portMode)
			}
			pm := portMode{}
			pm.mode, pm.set = modeOf(m.GetMode())
			p.ports[port] = pm
		}
		x.workloads[st.key.Namespace] = append(x.workloads[st.key.Namespace], p)
	}
	return x
}

// namespaceMode is the mode of namespace ns's mesh and namespace policies
// (Istio's GetNamespaceMutualTLSMode, falling back to PERMISSIVE).
func (x *peerIndex) namespaceMode(ns string) MTLSMode {
	mode := MTLSPermissive
	if x.mesh != nil && x.mesh.set {
		mode = x.mesh.mode
	}
	if p := x.byNS[ns]; p != nil && p.set && ns != x.root {
		mode = p.mode
	}
	return mode
}

// forWorkload is Istio's ComposePeerAuthentication for a workload in ns
// with labels.
func (x *peerIndex) forWorkload(ns string, labels map[string]string) PeerAuthn {
	out := PeerAuthn{Mode: x.namespaceMode(ns)}
	var w *peerPolicy
	for _, p := range x.workloads[ns] {
		if selects(p.selector, labels) {
			w = p
			break
		}
	}
	if w == nil {
		return out
	}
	if w.set {
		out.Mode = w.mode
	}
	if len(w.ports) > 0 {
		out.PortModes = make(map[uint32]MTLSMode, len(w.ports))
		for port, pm := range w.ports {
			if pm.set {
				out.PortModes[port] = pm.mode
			} else {
				out.PortModes[port] = out.Mode
			}
		}
	}
	return out
}

// PeerAuthentication returns the PeerAuthentication that applies to a
// workload in namespace ns with labels: what its sidecar's inbound side
// accepts.
func (m *Mesh) PeerAuthentication(ns string, labels map[string]string) PeerAuthn {
	return m.content.peers.forWorkload(ns, labels)
}

// MTLSMode is what clients assume of the service's workloads: the mode of
// the mesh and namespace PeerAuthentications of its namespace (Istio's
// BestEffortInferServiceMTLSMode; workload policies are not read).
// Auto mTLS sends mTLS unless it is DISABLE. Part of the service's config.
func (s *Service) MTLSMode() MTLSMode { return s.mtls }
