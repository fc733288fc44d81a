package ads

import (
	"slices"

	"github.com/pilotwire/pilotwire/pkg/model"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// scopeFor is what a proxy's config can depend on in mesh m, for the
// pusher's scoping (the same Sidecar choice generation makes:
// [model.Mesh.ScopeForProxy]).
func (s *Server) scopeFor(m *model.Mesh, p *proxy) *pb.Scope {
	sc := &pb.Scope{Seq: m.Seq, RootNamespace: s.meshConfig.RootNamespace()}
	imports, limited := m.EgressImports(p.Namespace, p.Labels)
	if !limited {
		sc.All = true
		return sc
	}
	sc.Imports = imports
	sc.BackedNamespaces = slices.Clone(m.NamespacesBackedBy(p.IP))
	return sc
}

// sameScope reports whether two scopes say the same, whatever their
// sequences.
func sameScope(a, b *pb.Scope) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.GetAll() == b.GetAll() && a.GetRootNamespace() == b.GetRootNamespace() &&
		slices.Equal(a.GetImports(), b.GetImports()) && slices.Equal(a.GetBackedNamespaces(), b.GetBackedNamespaces())
}

// refreshScope recomputes the connection's scope from the mesh it was
// just brought up to date with. The registry entry is rewritten when the
// scope changed, or when it was recomputed after a change that may alter
// it (renewed: so that the pusher trusts it again at this sequence).
func (c *conn) refreshScope(m *model.Mesh, renew bool) {
	if c.proxy == nil {
		return // no node yet: nothing generated
	}
	sc := c.s.scopeFor(m, c.proxy)
	if c.scope == nil || renew || !sameScope(c.scope, sc) {
		c.scope = sc
		c.subsChanged = true
	}
}

// scopeChanging reports whether an order may carry a change of what the
// connection depends on: a full push without keys (what changed is
// unknown) or one changing a Sidecar.
func scopeChanging(o *pb.PushOrder) bool {
	if o.GetFull() && len(o.GetConfigKeys()) == 0 {
		return true
	}
	for _, k := range o.GetConfigKeys() {
		if k.GetKind() == model.KindSidecar {
			return true
		}
	}
	return false
}
