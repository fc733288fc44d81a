// Package helmtest tests what deploy/ ships against real parts: the Helm
// chart through the helm binary (lint, template), its manifests applied to
// a real kube-apiserver (server-side dry-run with strict field validation,
// then a real server-side apply), its RBAC through SubjectAccessReviews
// derived from the kinds ingest's Kubernetes source watches, the images
// `make images` wrote (their binaries run), and the Grafana dashboard's
// metric names against the services' code.
//
// It has no product code; its tests need the helm binary (`make helm`,
// into .cache/tools/bin, or $PILOTWIRE_HELM), etcd and kube-apiserver
// (hack/k8s-binaries.sh) and the images (`make images`). Under -short the
// tests that need them skip; otherwise a missing one fails the test,
// naming the command that makes it. `make test` runs all three first.
package helmtest
