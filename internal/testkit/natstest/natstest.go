// Package natstest starts a real JetStream server for tests.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pilotwire/pilotwire/pkg/natsembed"
)

// Start runs a JetStream server on a random loopback port with storage in
// t.TempDir(), shut down at the end of the test. It returns the client URL.
func Start(t testing.TB) string {
	t.Helper()
	s, err := natsembed.Start(natsembed.Options{Addr: "127.0.0.1:0", StoreDir: t.TempDir()})
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s.URL()
}

// StartWith runs a JetStream server like Start whose options configure
// adjusts first (users, nkeys, accounts, TLS). It returns the client URL.
func StartWith(t testing.TB, configure func(*server.Options)) string {
	t.Helper()
	return StartServerWith(t, configure).ClientURL()
}

// StartServerWith is StartWith returning the server, for tests that
// reload its options (permissions taken away and given back).
func StartServerWith(t testing.TB, configure func(*server.Options)) *server.Server {
	t.Helper()
	opts := &server.Options{
		ServerName: "pwtest",
		Host:       "127.0.0.1",
		Port:       server.RANDOM_PORT,
		JetStream:  true,
		StoreDir:   t.TempDir(),
		NoSigs:     true,
		MaxPayload: 8 << 20,
	}
	configure(opts)
	s, err := server.NewServer(opts)
	if err != nil {
		t.Fatalf("nats server: %v", err)
	}
	s.Start()
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("nats server not ready for connections")
	}
	return s
}

// Connect opens a client connection to url, closed at the end of the test.
func Connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	return ConnectWith(t, url)
}

// ConnectWith is Connect with connection options (a user, an error
// handler).
func ConnectWith(t testing.TB, url string, opts ...nats.Option) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect nats: %v", err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("jetstream: %v", err)
	}
	return nc, js
}
