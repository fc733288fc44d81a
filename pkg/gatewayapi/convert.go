package gatewayapi

import (
	"cmp"
	"slices"

	networkingv1 "istio.io/api/networking/v1"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwv1beta1 "sigs.k8s.io/gateway-api/apis/v1beta1"
)

// Convert converts Gateway API objects into Istio Gateways and
// VirtualServices and computes their status. See the package comment for
// the names.
func Convert(in Input) Output {
	c := newConverter(in)
	gws := sortedObjects(in.Gateways, func(g *gwv1.Gateway) (string, string) { return g.Namespace, g.Name })
	for _, gw := range gws {
		if string(gw.Spec.GatewayClassName) != ClassName {
			continue
		}
		c.gateways[gw.Namespace+"/"+gw.Name] = c.convertGateway(gw)
	}
	for _, r := range sortedObjects(in.HTTPRoutes, func(r *gwv1.HTTPRoute) (string, string) { return r.Namespace, r.Name }) {
		c.convertRoute(httpRoute(r))
	}
	for _, r := range sortedObjects(in.GRPCRoutes, func(r *gwv1.GRPCRoute) (string, string) { return r.Namespace, r.Name }) {
		c.convertRoute(grpcRoute(r))
	}
	for _, lis := range c.gateways {
		for _, li := range lis {
			li.status.AttachedRoutes = li.attached
		}
	}
	slices.SortStableFunc(c.out.Gateways, func(a, b Config[*networkingv1.Gateway]) int {
		return cmpConfig(a.Namespace, a.Name, b.Namespace, b.Name)
	})
	slices.SortStableFunc(c.out.VirtualServices, func(a, b Config[*networkingv1.VirtualService]) int {
		return cmpConfig(a.Namespace, a.Name, b.Namespace, b.Name)
	})
	slices.SortStableFunc(c.out.Status.Routes, func(a, b RouteStatus) int {
		return cmp.Or(cmp.Compare(a.Ref.Kind, b.Ref.Kind), cmpConfig(a.Ref.Namespace, a.Ref.Name, b.Ref.Namespace, b.Ref.Name))
	})
	return c.out
}

func cmpConfig(ans, an, bns, bn string) int {
	return cmp.Or(cmp.Compare(ans, bns), cmp.Compare(an, bn))
}

// converter holds one conversion's indexes and output.
type converter struct {
	in       Input
	domain   string
	services map[string]bool         // "<ns>/<name>"
	entries  map[string]ServiceEntry // "<ns>/<name>"
	hosts    map[string]bool         // ServiceEntry hosts
	secrets  map[string]bool         // "<ns>/<name>"
	grants   grants                  // ReferenceGrants
	gateways map[string][]*listener  // Gateways of class istio, "<ns>/<name>"
	gwStatus map[Ref]*GatewayStatus  // into out.Status.Gateways (filled before routes)
	out      Output
}

func newConverter(in Input) *converter {
	c := &converter{
		in:       in,
		domain:   cmp.Or(in.DomainSuffix, DefaultDomainSuffix),
		services: make(map[string]bool),
		entries:  make(map[string]ServiceEntry),
		hosts:    make(map[string]bool),
		secrets:  make(map[string]bool),
		gateways: make(map[string][]*listener),
		gwStatus: make(map[Ref]*GatewayStatus),
		grants:   newGrants(in.ReferenceGrants),
	}
	// Gateway statuses are appended while gwStatus points into the slice:
	// reserve room so that appends never move it.
	c.out.Status.Gateways = make([]GatewayStatus, 0, len(in.Gateways))
	for _, s := range in.Services {
		c.services[s.Namespace+"/"+s.Name] = true
	}
	for _, se := range in.ServiceEntries {
		c.entries[se.Namespace+"/"+se.Name] = se
		for _, h := range se.Hosts {
			c.hosts[h] = true
		}
	}
	for _, s := range in.Secrets {
		c.secrets[s.Namespace+"/"+s.Name] = true
	}
	return c
}

// sortedObjects returns objs sorted by namespace and name, nils dropped.
func sortedObjects[T comparable](objs []T, key func(T) (string, string)) []T {
	var zero T
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if o != zero {
			out = append(out, o)
		}
	}
	slices.SortStableFunc(out, func(a, b T) int {
		ans, an := key(a)
		bns, bn := key(b)
		return cmpConfig(ans, an, bns, bn)
	})
	return out
}

// grants indexes ReferenceGrants by the namespace they grant access to.
type grants map[string][]*gwv1beta1.ReferenceGrant

func newGrants(rgs []*gwv1beta1.ReferenceGrant) grants {
	g := make(grants)
	for _, rg := range rgs {
		if rg != nil {
			g[rg.Namespace] = append(g[rg.Namespace], rg)
		}
	}
	return g
}

// allowed reports whether an object of fromGroup/fromKind in fromNS may
// reference toKind (core group when toGroup is "") toNS/toName.
func (g grants) allowed(fromGroup, fromKind, fromNS, toGroup, toKind, toNS, toName string) bool {
	for _, rg := range g[toNS] {
		from := slices.ContainsFunc(rg.Spec.From, func(f gwv1beta1.ReferenceGrantFrom) bool {
			return string(f.Group) == fromGroup && string(f.Kind) == fromKind && string(f.Namespace) == fromNS
		})
		if !from {
			continue
		}
		if slices.ContainsFunc(rg.Spec.To, func(t gwv1beta1.ReferenceGrantTo) bool {
			return string(t.Group) == toGroup && string(t.Kind) == toKind && (t.Name == nil || string(*t.Name) == toName)
		}) {
			return true
		}
	}
	return false
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

func ptr[T any](v T) *T { return &v }

// or returns a unless it is empty, else b.
func or(a, b string) string { return cmp.Or(a, b) }

// or2 returns a unless it is nil, else b.
func or2[T any](a, b *T) *T {
	if a != nil {
		return a
	}
	return b
}

func pick[T any](c bool, a, b T) T {
	if c {
		return a
	}
	return b
}
