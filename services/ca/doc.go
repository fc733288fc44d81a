// Package ca is pilotwire's certificate authority, compatible with
// istio-agent: it serves Istio's istio.v1.auth.IstioCertificateService
// (CreateCertificate) over TLS, authenticates each caller by a Kubernetes
// service-account token (a TokenReview against the API server) or by a
// client certificate it issued, and signs the caller's CSR for the
// caller's SPIFFE identity, spiffe://<trust domain>/ns/<ns>/sa/<sa>.
//
// Its root is a plug-in CA from the cacerts Secret when there is one, or
// a self-signed root kept in istio-ca-secret (made by the first replica,
// read by the others and by every restart), both in Istio's layout. It
// publishes the roots as the istio-ca-root-cert ConfigMap into every
// namespace and keeps them there. The signing key lives in the Secret and
// in this process's memory only: the CA uses no NATS, and logs no key.
//
// The pure core (CSR checks, certificate shapes, root making) is package
// pki; cmd/ca is the binary.
package ca
