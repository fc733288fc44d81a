package xdsgen

import (
	"slices"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	httpinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/http_inspector/v3"
	originaldstv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/original_dst/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Building blocks shared by the generators. Sub-messages shared between
// resources are never modified after construction; marshalling only reads
// them (size caches are updated atomically).

// ConnectTimeout is the upstream connect timeout of every cluster, Istio's
// default.
const ConnectTimeout = 10 * time.Second

// Names of the Envoy extensions used.
const (
	routerFilterName  = "envoy.filters.http.router"
	hcmFilterName     = "envoy.filters.network.http_connection_manager"
	tcpProxyName      = "envoy.filters.network.tcp_proxy"
	httpOptionsKey    = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"
	originalDstName   = "envoy.filters.listener.original_dst"
	httpInspectorName = "envoy.filters.listener.http_inspector"
)

// Filter chain matching on what the listener filters found, as Istio.
const rawBuffer = "raw_buffer" // no TLS

// plaintextHTTPALPNs are what the HTTP inspector reports for plaintext
// HTTP/1.1 and HTTP/2 (Istio leaves HTTP/1.0 to the TCP chain by default).
var plaintextHTTPALPNs = []string{"http/1.1", "h2c"}

// adsSource tells the client to fetch a resource over its ADS stream.
func adsSource() *corev3.ConfigSource {
	return &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}},
		ResourceApiVersion:    corev3.ApiVersion_V3,
	}
}

// adsSourceNoTimeout is adsSource with initial_fetch_timeout 0s, as Istio
// sets on Envoy's EDS and RDS sources: Envoy then waits for the resource
// instead of warming without it after 15 s.
func adsSourceNoTimeout() *corev3.ConfigSource {
	s := adsSource()
	s.InitialFetchTimeout = durationpb.New(0)
	return s
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
// filters and the router last (as gRPC requires). For proxyless gRPC.
func rdsManager(statPrefix, routeConfig string, filters ...*hcmv3.HttpFilter) *hcmv3.HttpConnectionManager {
	return &hcmv3.HttpConnectionManager{
		StatPrefix: statPrefix,
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{
			ConfigSource:    adsSource(),
			RouteConfigName: routeConfig,
		}},
		HttpFilters: append(slices.Clip(filters), routerFilter()),
	}
}

// sidecarManager is a sidecar's HTTP connection manager, as Istio builds
// it: codec chosen by the client (AUTO), WebSocket upgrades allowed, no
// stream idle timeout, paths normalised but escaped slashes kept, the
// client's address not trusted for internal/external decisions,
// 100-continue passed through (Istio's ENABLE_100_CONTINUE_HEADERS). Routes
// come over RDS (rds != "") or inline. filters go before the router.
func sidecarManager(statPrefix, rds string, inline *routev3.RouteConfiguration, http2 bool, filters ...*hcmv3.HttpFilter) *listenerv3.Filter {
	h := &hcmv3.HttpConnectionManager{
		StatPrefix:                   statPrefix,
		CodecType:                    hcmv3.HttpConnectionManager_AUTO,
		HttpFilters:                  append(slices.Clip(filters), routerFilter()),
		UseRemoteAddress:             wrapperspb.Bool(false),
		UpgradeConfigs:               []*hcmv3.HttpConnectionManager_UpgradeConfig{{UpgradeType: "websocket"}},
		StreamIdleTimeout:            durationpb.New(0),
		NormalizePath:                wrapperspb.Bool(true),
		PathWithEscapedSlashesAction: hcmv3.HttpConnectionManager_KEEP_UNCHANGED,
		Proxy_100Continue:            true,
	}
	if rds != "" {
		h.RouteSpecifier = &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{ConfigSource: adsSourceNoTimeout(), RouteConfigName: rds}}
	} else {
		h.RouteSpecifier = &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: inline}
	}
	if http2 {
		h.Http2ProtocolOptions = &corev3.Http2ProtocolOptions{}
	}
	return &listenerv3.Filter{Name: hcmFilterName, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(h)}}
}

// tcpProxy proxies the connection to cluster.
func tcpProxy(statPrefix, cluster string) *listenerv3.Filter {
	return &listenerv3.Filter{Name: tcpProxyName, ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustAny(&tcpproxyv3.TcpProxy{
		StatPrefix:       statPrefix,
		ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: cluster},
	})}}
}

// toCluster proxies to the cluster of the same name (stat prefix too).
func toCluster(cluster string) *listenerv3.Filter { return tcpProxy(cluster, cluster) }

var originalDstFilter = sync.OnceValue(func() *listenerv3.ListenerFilter {
	return &listenerv3.ListenerFilter{
		Name:       originalDstName,
		ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: mustAny(&originaldstv3.OriginalDst{})},
	}
})

var httpInspectorFilter = sync.OnceValue(func() *listenerv3.ListenerFilter {
	return &listenerv3.ListenerFilter{
		Name:       httpInspectorName,
		ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: mustAny(&httpinspectorv3.HttpInspector{})},
	}
})

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

// honourGRPCTimeout lets a gRPC client's grpc-timeout header set the
// request's timeout, up to the route's timeout (none: no limit), as Istio
// does for Envoy. Without it Envoy ignores the header. Istio sends the
// deprecated field: its replacement, max_stream_duration's
// grpc_timeout_header_max, changes how streams time out.
func honourGRPCTimeout(a *routev3.RouteAction) {
	//lint:ignore SA1019 the field Istio sends, for the same behaviour (see above)
	a.MaxGrpcTimeout = a.GetTimeout()
}

// outboundRoute is defaultRoute as an Envoy sidecar's outbound routes
// have it: no timeout, the grpc-timeout header honoured.
func outboundRoute(cluster string) *routev3.Route {
	r := defaultRoute(cluster, noTimeout)
	honourGRPCTimeout(r.GetRoute())
	return r
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
