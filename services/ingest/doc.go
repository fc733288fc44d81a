// Package ingest is the service that observes Kubernetes objects and records
// every add, update and delete as a change record on the CHANGES stream, the
// durable history every other pilotwire service reads.
//
// This version reads a directory of manifests (package filesource); a
// Kubernetes informer source will feed the same publisher (package publish).
// Run wires them; cmd/ingest is the binary.
package ingest
