// Package pki is the certificate authority's pure core: it parses and
// checks CA material (a signing certificate, its key, the chain above it
// and the root bundle), makes a self-signed root, and signs workload CSRs
// into certificates shaped as Istio's CA issues them (a SPIFFE URI SAN
// from the caller's identity, never the CSR's claims). It does no I/O
// beyond reading randomness: where the material is kept (Kubernetes
// Secrets) and who may ask (authentication) are the service's business.
package pki
