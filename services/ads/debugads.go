package ads

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"

	admin "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	csds "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// Debug requests over xDS, as Istio's pilot answers them: istioctl
// (proxy-status, version, internal-debug) opens an ADS stream of its own
// and asks for one of these type URLs. The answer is one response of the
// same type; the request starts no watch, makes the stream no proxy (it is
// not registered, not pushed to, not in /debug/syncz), and its nonce,
// which istioctl fills with the time, is ignored.
//
// A frontend knows only its own connections: each answer covers the
// proxies connected to it. The whole mesh's view is the registry's
// (`pilotwire status`).
const (
	// debugType runs one debug endpoint, named by the only resource name
	// ("syncz", "config_dump?proxyID=<pod>.<ns>"), and answers with its
	// output (an Any of this type whose value is the endpoint's body).
	debugType = "istio.io/debug"
	// debugSyncz answers with an envoy.service.status.v3.ClientConfig per
	// connected proxy (resource names, if any, pick proxies).
	debugSyncz = debugType + "/syncz"
	// debugConfigDump answers with the sections of an Envoy config dump of
	// what the proxy named by the only resource name is sent.
	debugConfigDump = debugType + "/config_dump"

	// maxDebugBytes bounds the resources of one debug answer; a syncz of
	// more proxies than fit is cut (counted in
	// pilotwire_ads_debug_responses_truncated_total): about 40,000
	// proxies at ~400 bytes each.
	maxDebugBytes = 16 << 20
)

// isDebugType reports whether t asks for debug information (Istio's test:
// the prefix).
func isDebugType(t string) bool { return strings.HasPrefix(t, debugType) }

// debugKind names a debug type URL in metrics.
func debugKind(t string) string {
	switch t {
	case debugSyncz:
		return "syncz"
	case debugConfigDump:
		return "config_dump"
	case debugType:
		return "debug"
	}
	return "unknown"
}

// debugAnswer is what a debug request is answered with.
type debugAnswer struct {
	resources []*discovery.Resource
	version   string
}

// handleDebug answers one debug request, or returns the error that ends
// the stream (a gRPC status): a bad node, no authentication, a request
// Istio refuses, or an unknown debug type.
func (c *conn) handleDebug(typeURL string, names []string, node *core.Node) (*debugAnswer, error) {
	kind := debugKind(typeURL)
	c.s.metrics.debugRequests.WithLabelValues(kind).Inc()
	if len(typeURL) > maxTypeURL {
		return nil, shed(codes.InvalidArgument, "type_url", "type_url of %d bytes", len(typeURL))
	}
	caller, err := c.debugCaller(node)
	if err != nil {
		return nil, err
	}
	scope, err := c.debugScope(caller)
	if err != nil {
		return nil, err
	}
	if kind == "unknown" {
		return nil, shed(codes.InvalidArgument, "type_url", "unknown debug type %q: this frontend answers %s, %s and %s", typeURL, debugSyncz, debugConfigDump, debugType)
	}
	if err := c.s.debugSlot.acquire(c.ctx); err != nil {
		return nil, nil // the stream is ending
	}
	defer c.s.debugSlot.release()
	c.releaseAdmission() // served: a debug stream never ACKs
	a := &debugAnswer{version: "0"}
	switch kind {
	case "syncz":
		a.resources = c.s.debugSyncz(scope, names)
	case "config_dump":
		// Not exactly one name, or no such proxy here (it may be on
		// another frontend): an empty answer, as Istio gives.
		if len(names) == 1 {
			a.resources, a.version = c.s.debugConfigDump(names[0], scope)
		}
	case "debug":
		if len(names) != 1 {
			return nil, shed(codes.InvalidArgument, "debug_request", "%s needs exactly one resource name (the debug endpoint), got %d", debugType, len(names))
		}
		u, err := url.Parse(names[0])
		if err != nil {
			return nil, shed(codes.InvalidArgument, "debug_request", "debug endpoint %.256q: %s", names[0], err.Error())
		}
		if scope != "" && u.Path != "config_dump" {
			return nil, shed(codes.PermissionDenied, "debug_auth", "%s %q is open to the root namespace only; namespace %s may ask for config_dump of its own proxies", debugType, u.Path, scope)
		}
		a.resources = []*discovery.Resource{{Name: names[0], Resource: &anypb.Any{TypeUrl: debugType, Value: c.s.runDebugEndpoint(u, scope)}}}
	}
	return a, nil
}

// debugCaller is who asks: the stream's proxy, or on a stream that only
// asks debug questions, the node of its first request, checked against
// the peer's identity as a proxy's is. istioctl's node says GENERATOR
// "event" (Istio's generator of these answers), which is accepted here.
func (c *conn) debugCaller(node *core.Node) (*proxy, error) {
	if c.proxy != nil {
		return c.proxy, nil
	}
	if c.debugProxy != nil {
		return c.debugProxy, nil
	}
	n := node
	if g := node.GetMetadata().GetFields()["GENERATOR"]; g.GetStringValue() == "event" {
		n = proto.Clone(node).(*core.Node)
		delete(n.Metadata.Fields, "GENERATOR")
	}
	p, err := parseNode(n)
	if err != nil {
		c.s.metrics.badRequests.WithLabelValues("node").Inc()
		return nil, shed(codes.InvalidArgument, "node", "%s", err.Error())
	}
	if err := c.s.authorize(c.ctx, p); err != nil {
		c.s.metrics.badRequests.WithLabelValues("identity").Inc()
		st := status.Convert(err)
		return nil, shed(st.Code(), "identity", "node %s: %s", p.ID, st.Message())
	}
	c.debugProxy, c.debugNode = p, node
	return p, nil
}

// debugScope is the namespace whose proxies caller may see, "" for all.
// As Istio's ENABLE_DEBUG_ENDPOINT_AUTH: the caller needs a verified
// identity (mutual TLS with the identity check, which ties the node's
// namespace to its certificate's); one from the mesh's root namespace
// sees everything, another only its own namespace.
func (c *conn) debugScope(caller *proxy) (string, error) {
	if c.s.debugAuthOff {
		return "", nil
	}
	if c.s.identity == nil {
		return "", shed(codes.Unauthenticated, "debug_auth", "authentication required: debug requests need mutual TLS (--client-ca), or --debug-endpoint-auth=false")
	}
	if caller.Namespace == c.s.meshConfig.RootNamespace() {
		return "", nil
	}
	return caller.Namespace, nil
}

// sendDebug sends a state-of-the-world debug answer.
func (c *conn) sendDebug(typeURL string, a *debugAnswer) error {
	resp := &discovery.DiscoveryResponse{VersionInfo: a.version, TypeUrl: typeURL, Nonce: c.debugNonce(), ControlPlane: c.s.controlPlane()}
	for _, r := range a.resources {
		resp.Resources = append(resp.Resources, r.GetResource())
	}
	return c.sendTimed(func() error { return c.sotw.SendMsg(resp) })
}

// sendDeltaDebug sends an incremental debug answer.
func (c *conn) sendDeltaDebug(typeURL string, a *debugAnswer) error {
	resp := &discovery.DeltaDiscoveryResponse{SystemVersionInfo: a.version, TypeUrl: typeURL, Nonce: c.debugNonce(), ControlPlane: c.s.controlPlane(), Resources: a.resources}
	return c.sendTimed(func() error { return c.delta.Send(resp) })
}

// debugNonce is a nonce of the stream's own sequence: an echo of it is
// stale, never forged.
func (c *conn) debugNonce() string {
	c.nonceSeq++
	return c.id + "-" + strconv.FormatUint(c.nonceSeq, 36)
}

// debugSyncz is a ClientConfig per connection in namespace scope ("" for
// all) whose proxy names matches (none: all), sorted by node id: the
// node with Istio's metadata (CLUSTER_ID, NAMESPACE, ISTIO_VERSION) and
// each watched type's status.
func (s *Server) debugSyncz(scope string, names []string) []*discovery.Resource {
	var out []*discovery.Resource
	size := 0
	for _, v := range s.connViews() {
		ci := v.info
		if scope != "" && ci.GetNamespace() != scope {
			continue
		}
		if len(names) > 0 && !matchesAny(ci, names) {
			continue
		}
		a, err := anypb.New(clientConfig(ci, v.version))
		if err != nil {
			s.log.Warn("syncz: marshal client config", "node", ci.GetNodeId(), "err", err)
			continue
		}
		if size += len(a.GetValue()); size > maxDebugBytes {
			s.metrics.debugTruncated.Inc()
			s.log.Warn("syncz over xDS cut short", "proxies", len(out), "bytes", maxDebugBytes)
			break
		}
		out = append(out, &discovery.Resource{Name: ci.GetNodeId(), Resource: a})
	}
	return out
}

// clientConfig is one connection's sync status as Istio's syncz shows it.
func clientConfig(ci *pb.ConnectionInfo, version string) *csds.ClientConfig {
	md := map[string]*structpb.Value{}
	for k, v := range map[string]string{"CLUSTER_ID": ci.GetClusterId(), "NAMESPACE": ci.GetNamespace(), "ISTIO_VERSION": version} {
		if v != "" && v != "unknown" {
			md[k] = structpb.NewStringValue(v)
		}
	}
	cc := &csds.ClientConfig{Node: &core.Node{Id: ci.GetNodeId(), Metadata: &structpb.Struct{Fields: md}}}
	for _, w := range ci.GetWatches() {
		x := &csds.ClientConfig_GenericXdsConfig{TypeUrl: w.GetTypeUrl(), VersionInfo: w.GetSentVersion(), LastUpdated: w.GetSentAt(), ConfigStatus: configStatus(w)}
		if e := w.GetNackError(); e != "" {
			x.ErrorState = &admin.UpdateFailureState{LastUpdateAttempt: w.GetSentAt(), Details: e}
		}
		cc.GenericXdsConfigs = append(cc.GenericXdsConfigs, x)
	}
	slices.SortFunc(cc.GenericXdsConfigs, func(a, b *csds.ClientConfig_GenericXdsConfig) int {
		return strings.Compare(a.GetTypeUrl(), b.GetTypeUrl()) // as Istio's
	})
	return cc
}

// configStatus is Istio's status of one watched type: ERROR while the
// last response is NACKed, NOT_SENT before any, SYNCED when the proxy
// ACKed the version last sent, STALE while it has not.
func configStatus(w *pb.Watch) csds.ConfigStatus {
	switch {
	case w.GetNackError() != "":
		return csds.ConfigStatus_ERROR
	case w.GetNonce() == "":
		return csds.ConfigStatus_NOT_SENT
	case w.GetAckedVersion() == w.GetSentVersion():
		return csds.ConfigStatus_SYNCED
	}
	return csds.ConfigStatus_STALE
}

// debugConfigDump is the config dump of the proxy named name (a node id,
// <pod>.<namespace> or a connection id) if it is connected here and in
// namespace scope ("" for any): Istio's sections, in Istio's order,
// endpoints left out (as Envoy's config_dump leaves them out by default),
// with the version of its clusters.
func (s *Server) debugConfigDump(name, scope string) ([]*discovery.Resource, string) {
	ci := s.findConn(name)
	if ci == nil || scope != "" && ci.GetNamespace() != scope {
		return nil, ""
	}
	_, byType, err := s.proxyDump(ci)
	if err != nil {
		s.log.Warn("config_dump over xDS", "node", ci.GetNodeId(), "err", err)
		return nil, ""
	}
	clusters := &admin.ClustersConfigDump{}
	if r := byType[resource.ClusterType]; r != nil {
		clusters.VersionInfo = r.version
		for _, a := range r.resources {
			clusters.DynamicActiveClusters = append(clusters.DynamicActiveClusters, &admin.ClustersConfigDump_DynamicCluster{VersionInfo: r.version, Cluster: a})
		}
	}
	listeners := &admin.ListenersConfigDump{}
	if r := byType[resource.ListenerType]; r != nil {
		listeners.VersionInfo = r.version
		for i, a := range r.resources {
			listeners.DynamicListeners = append(listeners.DynamicListeners, &admin.ListenersConfigDump_DynamicListener{
				Name: r.names[i], ActiveState: &admin.ListenersConfigDump_DynamicListenerState{VersionInfo: r.version, Listener: a},
			})
		}
	}
	routes := &admin.RoutesConfigDump{}
	if r := byType[resource.RouteType]; r != nil {
		for _, a := range r.resources {
			routes.DynamicRouteConfigs = append(routes.DynamicRouteConfigs, &admin.RoutesConfigDump_DynamicRouteConfig{VersionInfo: r.version, RouteConfig: a})
		}
	}
	var out []*discovery.Resource
	for _, m := range []proto.Message{&admin.BootstrapConfigDump{}, clusters, listeners, &admin.ScopedRoutesConfigDump{}, routes, &admin.SecretsConfigDump{}, &admin.EcdsConfigDump{}} {
		a, err := anypb.New(m)
		if err != nil {
			s.log.Warn("config_dump over xDS: marshal", "node", ci.GetNodeId(), "err", err)
			return nil, ""
		}
		out = append(out, &discovery.Resource{Resource: a})
	}
	return out, clusters.GetVersionInfo()
}

// callerNamespaceKey carries, in a debug endpoint's request context, the
// namespace an xDS debug caller is limited to.
type callerNamespaceKey struct{}

// runDebugEndpoint runs the debug endpoint u names (the path under
// /debug/) for a caller limited to namespace scope ("" for none) and
// returns its body, cut at maxDebugBytes.
func (s *Server) runDebugEndpoint(u *url.URL, scope string) []byte {
	ctx := context.WithValue(context.Background(), callerNamespaceKey{}, scope)
	target := &url.URL{Path: "/debug/" + u.Path, RawQuery: u.RawQuery}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target.String(), nil)
	if err != nil {
		return []byte(err.Error())
	}
	w := &captureWriter{header: http.Header{}}
	h, _ := s.debugMux().Handler(req)
	h.ServeHTTP(w, req)
	if w.truncated {
		s.metrics.debugTruncated.Inc()
	}
	return w.body.Bytes()
}

// debugMux holds the frontend's debug endpoints, for istio.io/debug.
func (s *Server) debugMux() *http.ServeMux {
	s.debugMuxOnce.Do(func() {
		s.debugEndpoints = http.NewServeMux()
		s.registerDebug(s.debugEndpoints.Handle)
	})
	return s.debugEndpoints
}

// captureWriter keeps a debug endpoint's body, up to maxDebugBytes.
type captureWriter struct {
	header    http.Header
	body      bytes.Buffer
	truncated bool
}

func (w *captureWriter) Header() http.Header { return w.header }
func (w *captureWriter) WriteHeader(int)     {}
func (w *captureWriter) Write(b []byte) (int, error) {
	if room := maxDebugBytes - w.body.Len(); len(b) > room {
		w.truncated = true
		w.body.Write(b[:max(room, 0)])
		return len(b), nil
	}
	return w.body.Write(b)
}

// controlPlaneInstance is the JSON istioctl reads from a response's
// control_plane.identifier (Istio's IstioControlPlaneInstance): which
// control plane answered and its build.
type controlPlaneInstance struct {
	Component string
	ID        string
	Info      buildInfo
}

// buildInfo is Istio's version.BuildInfo, as JSON.
type buildInfo struct {
	Version       string `json:"version"`
	GitRevision   string `json:"revision"`
	GolangVersion string `json:"golang_version"`
	BuildStatus   string `json:"status"`
	GitTag        string `json:"tag"`
}

// binaryBuild is this binary's build, read once.
var binaryBuild = sync.OnceValue(func() buildInfo {
	b := buildInfo{Version: "unknown", GitRevision: "unknown", BuildStatus: "Clean"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.GolangVersion = bi.GoVersion
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		b.Version, b.GitTag = v, v
	}
	for _, st := range bi.Settings {
		switch st.Key {
		case "vcs.revision":
			b.GitRevision = st.Value
			if b.Version == "unknown" {
				b.Version = st.Value
			}
		case "vcs.modified":
			if st.Value == "true" {
				b.BuildStatus = "Modified"
			}
		}
	}
	return b
})

// controlPlane identifies this frontend in debug answers.
func (s *Server) controlPlane() *core.ControlPlane {
	s.cpOnce.Do(func() {
		b, err := json.Marshal(controlPlaneInstance{Component: "pilotwire", ID: s.id, Info: binaryBuild()})
		if err != nil {
			s.log.Warn("control plane identifier", "err", err)
			return
		}
		s.cp = &core.ControlPlane{Identifier: string(b)}
	})
	return s.cp
}

// debugGate bounds debug work on a frontend: one answer is built at a
// time, so callers asking in a loop cost at most one core and one
// answer's memory, and wait their turn (their streams only). A nil gate
// bounds nothing.
type debugGate chan struct{}

func newDebugGate() debugGate { return make(debugGate, 1) }

func (g debugGate) acquire(ctx context.Context) error {
	if g == nil {
		return nil
	}
	select {
	case g <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g debugGate) release() {
	if g != nil {
		<-g
	}
}
