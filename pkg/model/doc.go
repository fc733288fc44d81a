// Package model materialises the mesh from the change stream.
//
// A [Store] applies change records (one Kubernetes object each, in
// change-stream sequence order) from one writer and keeps every object of
// every kind. Services (core/v1), EndpointSlices (discovery.k8s.io/v1), Pods
// (their labels, IP and node), Nodes (their topology labels), and Istio's DestinationRules, ServiceEntries and
// WorkloadEntries, Sidecars, VirtualServices and Gateways (istio.io/api
// networking/v1) are decoded; other kinds are
// only validated, and those Istio translates but the model does not
// (security policies, EnvoyFilters, TCPRoutes, ...) are each listed by
// [Mesh.Problems], an error when leaving them out fails open
// ([Unsupported]).
//
// [Store.Snapshot] returns a [Mesh]: an immutable view of the services and
// their ready endpoints at the applied sequence. A Mesh is shared by many
// goroutines without locks, so nothing reachable from it may be modified.
// Snapshots are rebuilt incrementally: a service untouched since the previous
// snapshot keeps its *[Service] pointer, which lets generators memoise
// per-service output with [Service.Memo] across snapshots. Output that does
// not depend on endpoints can use [Service.ConfigMemo] and [Mesh.ConfigMemo],
// which also survive endpoint changes.
//
// Semantics follow Kubernetes and Istio:
//   - A service is identified by namespace and name across clusters
//     (namespace sameness): the same Service in several clusters is one mesh
//     service whose hostname is <name>.<namespace>.svc.cluster.local.
//   - Its ports, clusterIP and headlessness come from the Service object of the
//     first cluster id in sorted order. Other clusters only add endpoints.
//   - EndpointSlices join a service through the kubernetes.io/service-name
//     label in the same namespace, from any cluster. An endpoint port is the
//     slice port with the same name and protocol as the Service port (a nil name
//     is ""; a nil protocol is TCP), which is how kube-proxy matches them;
//     targetPort is never used to find endpoint ports.
//   - Only ready endpoints serve; a nil ready condition means ready.
//   - Endpoints carry the labels of the Pod their slice entry's targetRef
//     names; DestinationRule subsets select endpoints by them. Their
//     locality is Istio's: the Pod's locality label, else its Node's
//     topology labels, else the slice endpoint's zone; a WorkloadEntry's
//     locality field, else its locality label.
//   - DestinationRules apply with Istio's precedence ([Mesh.DestinationRule]);
//     ServiceEntries are services named by their hosts; what is invalid or
//     conflicting is ignored on its own and listed by [Mesh.Problems].
//   - VirtualServices and Istio Gateways enter through one seam
//     (virtualservice.go) that converted Gateway API routes join; delegates
//     are inlined and several VirtualServices for a host merged as Istio
//     does ([Mesh.VirtualServiceFor], [Mesh.VirtualServices],
//     [Mesh.GatewaysFor]).
package model
