// Package e2e holds the system tests: the four services in-process on one
// embedded JetStream server (internal/testkit/pipelinetest), driven by raw
// ADS clients, grpc-go's real xDS client, and real kube-apiservers.
package e2e
