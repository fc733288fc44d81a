// Package ingest is the service that observes Kubernetes objects and records
// every add, update and delete as a change record on the CHANGES stream, the
// durable history every other pilotwire service reads.
//
// Two sources feed the same publisher (package publish, one per cluster
// id): a directory of manifests (package filesource) and live Kubernetes
// clusters (package kubesource). Run wires whichever the Config enables;
// cmd/ingest is the binary.
package ingest
