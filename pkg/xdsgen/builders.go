package xdsgen

import (
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Building blocks shared by the generators. Sub-messages shared between
// resources are never modified after construction; marshalling only reads
// them (size caches are updated atomically).

// ConnectTimeout is the upstream connect timeout of every cluster, Istio's
// default.
const ConnectTimeout = 10 * time.Second

// Names of the Envoy extensions used.
const (
	routerFilterName = "envoy.filters.http.router"
	hcmFilterName    = "envoy.filters.network.http_connection_manager"
	tcpProxyName     = "envoy.filters.network.tcp_proxy"
	httpOptionsKey   = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
)

// adsSource tells the client to fetch a resource over its ADS stream.
func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

// mustAny packs a message built by this package; marshalling a well-formed
// message cannot fail, so failure is a programming error.
func mustAny(m proto.Message) *anypb.Any {
	b, err := deterministic.Marshal(m)
	if err != nil {
		panic("xdsgen: marshal " + typeURLOf(m) + ": " + err.Error())
	}
	return &anypb.Any{TypeUrl: typeURLOf(m), Value: b}
}

var routerFilter = sync.OnceValue(func() *hcmv3.HttpFilter {
	return &hcmv3.HttpFilter{
		Name:       routerFilterName,
		ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: mustAny(&routerv3.Router{})},
	}
})

// rdsManager is an HTTP connection manager whose routes come over ADS, with
// the router as its only (and so last, as gRPC requires) filter.
func rdsManager(statPrefix, routeConfig string) *hcmv3.HttpConnectionManager {
	return &hcmv3.HttpConnectionManager{
		StatPrefix: statPrefix,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: routeConfig,
		}},
		HttpFilters: []*hcmv3.HttpFilter{routerFilter()},
	}
}

// edsCluster is a round-robin cluster whose endpoints come over ADS, in the
// load assignment of the same name.
func edsCluster(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{
		Name:                 name,
		ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{
			EdsConfig:   adsSource(),
			ServiceName: name,
		},
		ConnectTimeout: durationpb.New(ConnectTimeout),
		LbPolicy:       clusterv3.Cluster_ROUND_ROBIN,
	}
}

// defaultRoute sends every request to cluster.
func defaultRoute(cluster string, timeout *durationpb.Duration) *routev3.Route {
	return &routev3.Route{
		Name:  "default",
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: cluster},
			Timeout:          timeout,
		}},
	}
}
