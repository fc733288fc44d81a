package xdsgen

import (
	"cmp"
	"slices"
	"sync"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/pilotwire/pilotwire/pkg/model"
)

func endpointSet(m *model.Mesh) (*Set, error) {
	return perService(m, resource.EndpointType, keyEDS, true, loadAssignments)
}

// loadAssignments returns one ClusterLoadAssignment per served port, and
// one per port and subset some DestinationRule for the service defines:
// the endpoints carrying every label of the subset. These are shared by
// every proxy (see locality.go for those a proxy's locality changes), so a
// subset name two rules define (for proxies in different namespaces)
// takes the labels of the first (see [model.Service.Subset]).
func loadAssignments(svc *model.Service) ([]*Resource, error) {
	var out []*Resource
	subsets := svc.Subsets()
	err := meshPorts(svc, func(p *model.Port, _ protocol) error {
		name := clusterName(svc, p)
		cla, _ := groupLocalities(name, p.Endpoints, false)
		r, err := newResource(name, cla)
		if err != nil {
			return err
		}
		out = append(out, r)
		for _, subset := range subsets {
			name := model.OutboundClusterName(p.Port, subset, svc.Hostname)
			cla, _ := groupLocalities(name, subsetEndpoints(p.Endpoints, svc.Subset(subset).GetLabels()), false)
			r, err := newResource(name, cla)
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
	})
	return out, err
}

// subsetEndpoints are the endpoints carrying every label of a subset.
func subsetEndpoints(all []model.Endpoint, labels map[string]string) []model.Endpoint {
	var eps []model.Endpoint
	for i := range all {
		if all[i].SelectedBy(labels) {
			eps = append(eps, all[i])
		}
	}
	return eps
}

// endpointWeight is every endpoint's weight. Shared, read-only.
var endpointWeight = wrapperspb.UInt32(1)

// localityGroup is one locality of a load assignment and the endpoints
// behind its LbEndpoints (in the same order).
type localityGroup struct {
	lle *endpointv3.LocalityLbEndpoints
	eps []model.Endpoint
}

// groupLocalities builds a load assignment, its endpoints grouped by
// locality (region/zone/subzone: [model.Endpoint.Locality]) as Istio's
// endpoint builder does: a locality is a place, and endpoints of several
// clusters in one place are one locality. Clients need this: gRPC rejects
// duplicate localities and finds no target in a locality without an id or
// weight, so every locality gets a Locality (possibly all-empty) and a
// weight equal to the sum of its endpoints' weights, which spreads load
// evenly per endpoint under gRPC's weighted-target policy. Localities are
// sorted by region, zone and subzone, all at priority 0; endpoints keep
// the model's order. The result is new: callers may change it. With keep,
// each group also lists its endpoints (failoverPriority reads them).
func groupLocalities(name string, eps []model.Endpoint, keep bool) (*endpointv3.ClusterLoadAssignment, []localityGroup) {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name}
	if len(eps) == 0 {
		return cla, nil
	}
	byLocality := make(map[model.Locality]int)
	var groups []localityGroup
	for _, ep := range eps {
		key := ep.Locality()
		i, ok := byLocality[key]
		if !ok {
			i = len(cla.Endpoints)
			byLocality[key] = i
			cla.Endpoints = append(cla.Endpoints, &endpointv3.LocalityLbEndpoints{
				Locality:            &corev3.Locality{Region: ep.Region, Zone: ep.Zone, SubZone: ep.SubZone},
				LoadBalancingWeight: wrapperspb.UInt32(0),
			})
			if keep {
				groups = append(groups, localityGroup{lle: cla.Endpoints[i]})
			}
		}
		lle := cla.Endpoints[i]
		weight := endpointWeight
		if ep.Weight > 1 {
			weight = wrapperspb.UInt32(ep.Weight)
		}
		lle.LoadBalancingWeight.Value += max(ep.Weight, 1)
		lle.LbEndpoints = append(lle.LbEndpoints, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: socketAddress(ep.Address, ep.Port),
			}},
			HealthStatus:        corev3.HealthStatus_HEALTHY,
			LoadBalancingWeight: weight,
			Metadata:            tlsModeMetadata(ep.TLSMode()),
		})
		if keep {
			groups[i].eps = append(groups[i].eps, ep)
		}
	}
	byPlace := func(a, b *endpointv3.LocalityLbEndpoints) int {
		x, y := a.Locality, b.Locality
		return cmp.Or(cmp.Compare(x.Region, y.Region), cmp.Compare(x.Zone, y.Zone), cmp.Compare(x.SubZone, y.SubZone))
	}
	slices.SortFunc(cla.Endpoints, byPlace)
	slices.SortFunc(groups, func(a, b localityGroup) int { return byPlace(a.lle, b.lle) })
	return cla, groups
}

// transportSocketMatchKey is the endpoint metadata a cluster's
// transport_socket_matches read.
const transportSocketMatchKey = "envoy.transport_socket_match"

// tlsModeMetadata says an endpoint's TLS mode (nil for none), as Istio's
// endpoint builder: clusters pick Istio mTLS for endpoints of mode
// "istio". The metadata of "istio" is shared, read-only.
func tlsModeMetadata(mode string) *corev3.Metadata {
	switch mode {
	case "":
		return nil
	case istioTLSMode:
		return istioTLSModeMetadata()
	}
	return newTLSModeMetadata(mode)
}

const istioTLSMode = "istio"

var istioTLSModeMetadata = sync.OnceValue(func() *corev3.Metadata { return newTLSModeMetadata(istioTLSMode) })

func newTLSModeMetadata(mode string) *corev3.Metadata {
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
		transportSocketMatchKey: {Fields: map[string]*structpb.Value{"tlsMode": structpb.NewStringValue(mode)}},
	}}
}

func socketAddress(ip string, port int32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Protocol:      corev3.SocketAddress_TCP,
		Address:       ip,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)},
	}}}
}
