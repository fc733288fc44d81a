package xdsgen

import (
	"strconv"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/pilotwire/pilotwire/pkg/model"
)

// The proxyless gRPC generator. A client dialling xds:///<host>:<port> asks
// for the listener <host>:<port>: an API listener whose HTTP connection
// manager takes the route configuration of the same name over ADS, with the
// router filter last (gRPC rejects anything else). Every TCP port of a
// service is served, whatever its protocol: the client decides what to dial.

func grpcListenerSet(m *model.Mesh) (*Set, error) {
	return perService(m, resource.ListenerType, keyGRPCLDS, false, grpcListeners)
}

func grpcRouteSet(m *model.Mesh) (*Set, error) {
	return perService(m, resource.RouteType, keyGRPCRDS, false, grpcRoutes)
}

func grpcClusterSet(m *model.Mesh) (*Set, error) {
	return perService(m, resource.ClusterType, keyGRPCCDS, false, grpcClusters)
}

// grpcTarget is the authority a gRPC client dials: <host>:<port>.
func grpcTarget(svc *model.Service, p *model.Port) string {
	return svc.Hostname + ":" + strconv.Itoa(int(p.Port))
}

func grpcListeners(svc *model.Service) ([]*Resource, error) {
	var out []*Resource
	err := servedPorts(svc, func(p *model.Port, _ protocol) error {
		name := grpcTarget(svc, p)
		l := &listenerv3.Listener{
			Name:        name,
			ApiListener: &listenerv3.ApiListener{ApiListener: mustAny(rdsManager(name, name))},
		}
		r, err := newResource(name, l)
		out = append(out, r)
		return err
	})
	return out, err
}

func grpcRoutes(svc *model.Service) ([]*Resource, error) {
	var out []*Resource
	err := servedPorts(svc, func(p *model.Port, _ protocol) error {
		name := grpcTarget(svc, p)
		rc := &routev3.RouteConfiguration{
			Name: name,
			VirtualHosts: []*routev3.VirtualHost{{
				Name:    name,
				Domains: []string{name, svc.Hostname},
				Routes:  []*routev3.Route{defaultRoute(clusterName(svc, p), nil)},
			}},
		}
		r, err := newResource(name, rc)
		out = append(out, r)
		return err
	})
	return out, err
}

func grpcClusters(svc *model.Service) ([]*Resource, error) {
	var out []*Resource
	err := servedPorts(svc, func(p *model.Port, _ protocol) error {
		name := clusterName(svc, p)
		r, err := newResource(name, edsCluster(name))
		out = append(out, r)
		return err
	})
	return out, err
}
