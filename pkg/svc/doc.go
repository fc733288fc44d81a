// Package svc is the shell every pilotwire service shares: common flags and
// their environment variables, the slog logger, the NATS connection, and the
// HTTP server for /healthz, /readyz, /metrics and debug handlers.
package svc
