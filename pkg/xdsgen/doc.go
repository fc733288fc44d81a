// Package xdsgen turns a [model.Mesh] into Envoy xDS resources.
//
// Generation is a pure function of the mesh: [Generate] takes a mesh, a
// [Generator] (Istio-style Envoy sidecar, or proxyless gRPC) and a resource
// type URL, and returns a [Set] of resources, each marshalled once into an
// Any and versioned by a hash of its deterministic encoding. Two replicas
// generating from equal meshes therefore send identical bytes and versions.
//
// Output is memoised on the immutable model objects, at two levels:
//   - per service ([model.Service.Memo], [model.Service.ConfigMemo]): a
//     service's clusters, load assignments and gRPC listeners/routes are
//     marshalled once and reused by every later mesh in which that service did
//     not change; clusters, listeners and routes (which never read endpoints)
//     even survive endpoint changes;
//   - per mesh ([model.Mesh.Memo], [model.Mesh.ConfigMemo]): asking twice for
//     the same (generator, type) returns the same *Set.
//
// [Marshals] counts resource marshals so tests can prove the sharing.
//
// Output depends on the proxy ([Proxy], [GenerateFor]) only where Istio's
// does: its inbound side (the ports its pod serves, found by its IP among
// the endpoints), its namespace (short host names), the mesh config
// (outbound traffic policy) and, for load assignments of services a
// localityLbSetting applies to, its locality and the labels
// failoverPriority compares (locality.go). Such sets are memoised per
// distinct input, so pods backing the same services, or in the same
// locality, share them.
//
// Naming follows Istio: clusters and load assignments
// outbound|<port>||<host>, inbound|<targetPort>||, PassthroughCluster,
// BlackHoleCluster, InboundPassthroughCluster; sidecar listeners
// virtualOutbound (bound, 15001) and virtualInbound (bound, 15006), and the
// unbound 0.0.0.0_<port> (HTTP, routed by the route configuration <port>)
// and <ip>_<port> (TCP and sniffed); proxyless gRPC listeners and route
// configurations <host>:<port>, and server listeners
// xds.istio.io/grpc/lds/inbound/<addr>. docs/architecture.md ("xDS
// generated") describes which traffic takes which path.
package xdsgen
