// Package natsembed runs an in-process nats-server with JetStream, for the
// embedded default (`pilotwire up`) and for tests.
package natsembed

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options configure an embedded server.
type Options struct {
	// Addr is host:port to listen on; port 0 picks a free port. Empty means
	// 127.0.0.1:4222.
	Addr string
	// StoreDir holds JetStream's file storage.
	StoreDir string
	// ServerName names the server (defaults to "pilotwire").
	ServerName string
	// Logs enables the server's own logging to stderr.
	Logs bool
	// ReadyTimeout bounds the wait for the server to accept clients.
	ReadyTimeout time.Duration
}

// Server is a running embedded nats-server.
type Server struct {
	ns *server.Server
}

// Start starts a server and waits until it accepts clients.
func Start(o Options) (*Server, error) {
	if o.Addr == "" {
		o.Addr = "127.0.0.1:4222"
	}
	host, portStr, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return nil, fmt.Errorf("nats address %q: %w", o.Addr, err)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return nil, fmt.Errorf("nats address %q: bad port: %w", o.Addr, err)
	}
	if port == 0 {
		port = server.RANDOM_PORT
	}
	if o.ServerName == "" {
		o.ServerName = "pilotwire"
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 10 * time.Second
	}
	opts := &server.Options{
		ServerName: o.ServerName,
		Host:       host,
		Port:       port,
		JetStream:  true,
		StoreDir:   o.StoreDir,
		NoSigs:     true,
		// Change records carry whole objects; allow the stream's cap.
		MaxPayload: 8 << 20,
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("new nats server: %w", err)
	}
	if o.Logs {
		ns.ConfigureLogger()
	}
	ns.Start()
	if !ns.ReadyForConnections(o.ReadyTimeout) {
		ns.Shutdown()
		return nil, fmt.Errorf("nats server on %s not ready within %s", o.Addr, o.ReadyTimeout)
	}
	return &Server{ns: ns}, nil
}

// URL is the client URL of the server.
func (s *Server) URL() string { return s.ns.ClientURL() }

// Shutdown stops the server and waits for it to finish.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}
