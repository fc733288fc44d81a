package xdsgen

import (
	"cmp"
	"slices"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/pilotwire/pilotwire/pkg/model"
)

func endpointSet(m *model.Mesh) (*Set, error) {
	return perService(m, resource.EndpointType, keyEDS, true, loadAssignments)
}

// loadAssignments returns one ClusterLoadAssignment per served port.
func loadAssignments(svc *model.Service) ([]*Resource, error) {
	var out []*Resource
	err := meshPorts(svc, func(p *model.Port, _ protocol) error {
		name := clusterName(svc, p)
		r, err := newResource(name, loadAssignment(name, p.Endpoints))
		out = append(out, r)
		return err
	})
	return out, err
}

// endpointWeight is every endpoint's weight. Shared, read-only.
var endpointWeight = wrapperspb.UInt32(1)

// loadAssignment groups endpoints by locality. A locality here is the zone
// only (region and sub-zone are not known from an EndpointSlice): it is a
// place, and endpoints of several clusters in one zone are one locality, as
// in Istio. Clients need this: gRPC rejects duplicate localities and finds no
// target in a locality without an id or weight, so every locality gets a
// Locality (possibly all-empty) and a weight equal to its endpoint count,
// which spreads load evenly per endpoint under gRPC's weighted-target policy.
// Localities are sorted by zone; endpoints keep the model's order.
func loadAssignment(name string, eps []model.Endpoint) *endpointv3.ClusterLoadAssignment {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name}
	if len(eps) == 0 {
		return cla
	}
	byZone := make(map[string]*endpointv3.LocalityLbEndpoints)
	for _, ep := range eps {
		loc := byZone[ep.Zone]
		if loc == nil {
			loc = &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{Zone: ep.Zone}}
			byZone[ep.Zone] = loc
			cla.Endpoints = append(cla.Endpoints, loc)
		}
		loc.LbEndpoints = append(loc.LbEndpoints, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: socketAddress(ep.Address, ep.Port),
			}},
			HealthStatus:        corev3.HealthStatus_HEALTHY,
			LoadBalancingWeight: endpointWeight,
		})
	}
	for _, loc := range cla.Endpoints {
		loc.LoadBalancingWeight = wrapperspb.UInt32(uint32(len(loc.LbEndpoints)))
	}
	slices.SortFunc(cla.Endpoints, func(a, b *endpointv3.LocalityLbEndpoints) int {
		return cmp.Compare(a.Locality.Zone, b.Locality.Zone)
	})
	return cla
}

func socketAddress(ip string, port int32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Protocol:      corev3.SocketAddress_TCP,
		Address:       ip,
		PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(port)},
	}}}
}
