package ads

import (
	"context"

	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The per-type xDS services, for clients that do not use ADS. Each stream
// is a connection restricted to one type; Fetch answers once from the model.

type clusterServer struct {
	clusterservice.UnimplementedClusterDiscoveryServiceServer
	s *Server
}

func (x clusterServer) StreamClusters(st grpcSotW) error {
	return x.s.serveSotW(st, resource.ClusterType)
}
func (x clusterServer) DeltaClusters(st grpcDelta) error {
	return x.s.serveDelta(st, resource.ClusterType)
}
func (x clusterServer) FetchClusters(ctx context.Context, r *discovery.DiscoveryRequest) (*discovery.DiscoveryResponse, error) {
	return x.s.fetch(ctx, r, resource.ClusterType)
}

type endpointServer struct {
	endpointservice.UnimplementedEndpointDiscoveryServiceServer
	s *Server
}

func (x endpointServer) StreamEndpoints(st grpcSotW) error {
	return x.s.serveSotW(st, resource.EndpointType)
}
func (x endpointServer) DeltaEndpoints(st grpcDelta) error {
	return x.s.serveDelta(st, resource.EndpointType)
}
func (x endpointServer) FetchEndpoints(ctx context.Context, r *discovery.DiscoveryRequest) (*discovery.DiscoveryResponse, error) {
	return x.s.fetch(ctx, r, resource.EndpointType)
}

type listenerServer struct {
	listenerservice.UnimplementedListenerDiscoveryServiceServer
	s *Server
}

func (x listenerServer) StreamListeners(st grpcSotW) error {
	return x.s.serveSotW(st, resource.ListenerType)
}
func (x listenerServer) DeltaListeners(st grpcDelta) error {
	return x.s.serveDelta(st, resource.ListenerType)
}
func (x listenerServer) FetchListeners(ctx context.Context, r *discovery.DiscoveryRequest) (*discovery.DiscoveryResponse, error) {
	return x.s.fetch(ctx, r, resource.ListenerType)
}

type routeServer struct {
	routeservice.UnimplementedRouteDiscoveryServiceServer
	s *Server
}

func (x routeServer) StreamRoutes(st grpcSotW) error { return x.s.serveSotW(st, resource.RouteType) }
func (x routeServer) DeltaRoutes(st grpcDelta) error { return x.s.serveDelta(st, resource.RouteType) }
func (x routeServer) FetchRoutes(ctx context.Context, r *discovery.DiscoveryRequest) (*discovery.DiscoveryResponse, error) {
	return x.s.fetch(ctx, r, resource.RouteType)
}

var (
	_ clusterservice.ClusterDiscoveryServiceServer   = clusterServer{}
	_ endpointservice.EndpointDiscoveryServiceServer = endpointServer{}
	_ listenerservice.ListenerDiscoveryServiceServer = listenerServer{}
	_ routeservice.RouteDiscoveryServiceServer       = routeServer{}
)

// register adds ADS and the per-type services to a gRPC server.
func (s *Server) register(gs *grpc.Server) {
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, s)
	clusterservice.RegisterClusterDiscoveryServiceServer(gs, clusterServer{s: s})
	endpointservice.RegisterEndpointDiscoveryServiceServer(gs, endpointServer{s: s})
	listenerservice.RegisterListenerDiscoveryServiceServer(gs, listenerServer{s: s})
	routeservice.RegisterRouteDiscoveryServiceServer(gs, routeServer{s: s})
}

// fetch answers a one-shot (REST-style) request from the current model.
func (s *Server) fetch(ctx context.Context, req *discovery.DiscoveryRequest, t string) (*discovery.DiscoveryResponse, error) {
	if req.GetTypeUrl() != "" && req.GetTypeUrl() != t {
		return nil, status.Errorf(codes.InvalidArgument, "type %s on a %s fetch", req.GetTypeUrl(), shortType(t))
	}
	p, err := parseNode(req.GetNode())
	if err != nil {
		s.metrics.badRequests.WithLabelValues("node").Inc()
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	if err := s.authorize(ctx, p); err != nil {
		return nil, err
	}
	w := &watch{typeURL: t}
	w.setNames(req.GetResourceNames())
	r, err := s.build(s.store.Snapshot(), p, w)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "generate %s: %v", shortType(t), err)
	}
	return &discovery.DiscoveryResponse{VersionInfo: r.version, Resources: r.resources, TypeUrl: t}, nil
}
