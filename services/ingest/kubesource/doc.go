// Package kubesource is ingest's source of objects from live Kubernetes
// clusters: client-go informers feed a keyed work queue, and one worker per
// cluster turns queued keys into changes for that cluster's publisher
// (package publish).
//
// What is watched, per cluster:
//   - core kinds, always: Services, EndpointSlices, Pods, Nodes and
//     Namespaces (typed informers; Pods and Nodes trimmed to the fields the
//     mesh uses, every object stripped of managedFields and the
//     last-applied-configuration annotation);
//   - Istio config kinds and, when enabled, Gateway API kinds, through
//     dynamic informers, only while their CustomResourceDefinition is
//     installed and Established. A CRD informer drives discovery: a kind
//     starts being watched when its CRD appears and stops when the CRD is
//     gone, without a restart. A missing CRD never blocks readiness.
//
// Flow, per cluster: informer handlers only enqueue an item keyed by
// GroupVersionKind, namespace and name (one handler per kind). The worker
// reads the object's current state from the informer's store (level
// triggered: a burst of events on one object costs one record) and calls
// the publisher. Once the initial list of every informer of the cluster has
// been delivered, the worker hands the publisher the complete object set
// (publish.Publisher.Sync): a restart with nothing changed publishes
// nothing, and objects deleted while ingest was down get delete records.
// After that it applies individual changes. A relist or resync publishes
// nothing for objects whose resourceVersion did not change, and an update
// that changed nothing the record holds (only managedFields, or only fields
// the transform drops) is not even queued.
//
// Many clusters: a Source runs static clusters (flags, in-cluster config)
// and, when a config cluster is named, the clusters of Istio's multicluster
// Secrets (label istio/multiCluster=true, one kubeconfig per data key named
// by cluster id), added, replaced and removed live. Each cluster has its own
// publisher, which owns that cluster id's subjects. A cluster that has not
// synced within the sync timeout is reported (log, metric, status) and
// stops holding up readiness; it keeps trying and syncs when it can. A
// removed cluster's informers stop and every object it had on the stream
// gets a delete record, the event-sourced form of Istio dropping a removed
// cluster's endpoints.
//
// Gateway API status: while this instance holds a config cluster's lease
// and the Gateway API is enabled, a status writer (gwstatus.go) computes
// the conditions of the cluster's Gateway API objects with package
// gatewayapi and writes those that changed, debounced.
package kubesource
