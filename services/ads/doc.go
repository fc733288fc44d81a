// Package ads is the pilotwire ADS frontend: it holds gRPC ADS streams from
// Envoys and proxyless gRPC clients, keeps its own model of the mesh by
// following the change stream, and generates CDS, EDS, LDS and RDS for each
// connection when the pusher orders it (and when the client asks), and
// answers istioctl's debug requests over xDS (debugads.go).
//
// Each connection has one loop that owns its xDS state; one goroutine per
// connection only receives requests and hands them to the loop.
package ads
