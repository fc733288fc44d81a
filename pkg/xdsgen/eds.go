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

// loadAssignments returns one ClusterLoadAssignment per served port, and
// one per port and subset some DestinationRule for the service defines:
// the endpoints carrying every label of the subset. Load assignments are
// shared by every proxy, so a subset name two rules define (for proxies in
// different namespaces) takes the labels of the first (see
// [model.Service.Subset]).
func loadAssignments(svc *model.Service) ([]*Resource, error) {
	var out []*Resource
	subsets := svc.Subsets()
	err := meshPorts(svc, func(p *model.Port, _ protocol) error {
		name := clusterName(svc, p)
		r, err := newResource(name, loadAssignment(name, p.Endpoints))
		if err != nil {
			return err
		}
		out = append(out, r)
		for _, subset := range subsets {
			labels := svc.Subset(subset).GetLabels()
			var eps []model.Endpoint
			for i := range p.Endpoints {
				if p.Endpoints[i].SelectedBy(labels) {
					eps = append(eps, p.Endpoints[i])
				}
			}
			name := model.OutboundClusterName(p.Port, subset, svc.Hostname)
			r, err := newResource(name, loadAssignment(name, eps))
			if err != nil {
				return err
			}
			out = append(out, r)
		}
		return nil
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
	type locality struct{ region, zone, subZone string }
	byLocality := make(map[locality]*endpointv3.LocalityLbEndpoints)
	weights := make(map[*endpointv3.LocalityLbEndpoints]uint32)
	for _, ep := range eps {
		key := locality{ep.Region, ep.Zone, ep.SubZone}
		loc := byLocality[key]
		if loc == nil {
			loc = &endpointv3.LocalityLbEndpoints{Locality: &corev3.Locality{Region: ep.Region, Zone: ep.Zone, SubZone: ep.SubZone}}
			byLocality[key] = loc
			cla.Endpoints = append(cla.Endpoints, loc)
		}
		weight := endpointWeight
		if ep.Weight > 1 {
			weight = wrapperspb.UInt32(ep.Weight)
		}
		weights[loc] += max(ep.Weight, 1)
		loc.LbEndpoints = append(loc.LbEndpoints, &endpointv3.LbEndpoint{
			HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: socketAddress(ep.Address, ep.Port),
			}},
			HealthStatus:        corev3.HealthStatus_HEALTHY,
			LoadBalancingWeight: weight,
		})
	}
	for _, loc := range cla.Endpoints {
		loc.LoadBalancingWeight = wrapperspb.UInt32(weights[loc])
	}
	slices.SortFunc(cla.Endpoints, func(a, b *endpointv3.LocalityLbEndpoints) int {
		return cmp.Or(cmp.Compare(a.Locality.Region, b.Locality.Region), cmp.Compare(a.Locality.Zone, b.Locality.Zone),
			cmp.Compare(a.Locality.SubZone, b.Locality.SubZone))
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
