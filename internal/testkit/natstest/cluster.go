package natstest

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Cluster is a JetStream cluster of in-process nats-servers clustered on
// loopback. Every node's client and route ports are fixed when the cluster
// is made, so a node stopped and started again comes back on the same
// addresses with the same storage, as a restarted pod would.
type Cluster struct {
	// set at construction
	t     testing.TB
	name  string
	nodes []*clusterNode
	// configure adjusts every node's options (auth, TLS) before it starts.
	configure func(*server.Options)

	mu sync.Mutex // guards the servers of nodes
}

type clusterNode struct {
	name        string
	clientPort  int
	clusterPort int
	storeDir    string
	srv         *server.Server // nil while stopped; guarded by Cluster.mu
}

// ClusterOptions tune NewCluster.
type ClusterOptions struct {
	// Nodes is the cluster size (default 3).
	Nodes int
	// Configure, if set, adjusts each node's server options before it
	// starts (accounts, users, TLS).
	Configure func(*server.Options)
}

// NewCluster makes a cluster of stopped nodes with fixed loopback ports and
// storage in t.TempDir(); Start starts them. Every running node is shut
// down at the end of the test.
func NewCluster(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	if o.Nodes <= 0 {
		o.Nodes = 3
	}
	c := &Cluster{t: t, name: "pwtest", configure: o.Configure}
	ports := freePorts(t, 2*o.Nodes)
	for i := range o.Nodes {
		c.nodes = append(c.nodes, &clusterNode{
			name:        fmt.Sprintf("n%d", i),
			clientPort:  ports[2*i],
			clusterPort: ports[2*i+1],
			storeDir:    t.TempDir(),
		})
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.Stop(i)
		}
	})
	return c
}

// StartCluster makes a cluster of o.Nodes nodes, starts them all and waits
// until it has a JetStream meta leader.
func StartCluster(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	c := NewCluster(t, o)
	for i := range c.nodes {
		c.Start(i)
	}
	c.WaitMetaLeader()
	return c
}

// Start starts node i (a no-op when it runs) and waits until it accepts
// clients. A cluster that has not yet got a quorum of nodes running has no
// meta leader: its JetStream API answers no request.
func (c *Cluster) Start(i int) {
	c.t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.nodes[i]
	if n.srv != nil {
		return
	}
	var routes []*url.URL
	for j, o := range c.nodes {
		if j != i {
			routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", o.clusterPort)})
		}
	}
	opts := &server.Options{
		ServerName: n.name,
		Host:       "127.0.0.1",
		Port:       n.clientPort,
		JetStream:  true,
		StoreDir:   n.storeDir,
		NoSigs:     true,
		MaxPayload: 8 << 20,
		Cluster:    server.ClusterOpts{Name: c.name, Host: "127.0.0.1", Port: n.clusterPort},
		Routes:     routes,
	}
	if c.configure != nil {
		c.configure(opts)
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		c.t.Fatalf("nats node %s: %v", n.name, err)
	}
	srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		srv.Shutdown()
		c.t.Fatalf("nats node %s not ready for connections", n.name)
	}
	n.srv = srv
}

// Stop shuts node i down (a no-op when it is stopped); its storage stays.
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	srv := c.nodes[i].srv
	c.nodes[i].srv = nil
	c.mu.Unlock()
	if srv != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
	}
}

// Server returns node i's server, nil while it is stopped.
func (c *Cluster) Server(i int) *server.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nodes[i].srv
}

// URL is the client URL of node i (valid whether it runs or not).
func (c *Cluster) URL(i int) string {
	return fmt.Sprintf("nats://127.0.0.1:%d", c.nodes[i].clientPort)
}

// URLs is every node's client URL, comma separated, as clients take a
// server list.
func (c *Cluster) URLs() string {
	urls := make([]string, len(c.nodes))
	for i := range c.nodes {
		urls[i] = c.URL(i)
	}
	return strings.Join(urls, ",")
}

// WaitMetaLeader waits until a running node is the JetStream meta leader
// and every running node knows the cluster is current.
func (c *Cluster) WaitMetaLeader() {
	c.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !c.hasMetaLeader() {
		if time.Now().After(deadline) {
			c.t.Fatalf("nats cluster: no JetStream meta leader within 60s")
		}
		<-tick.C
	}
}

func (c *Cluster) hasMetaLeader() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	leader := false
	for _, n := range c.nodes {
		if n.srv == nil {
			continue
		}
		if !n.srv.JetStreamIsCurrent() {
			return false
		}
		leader = leader || n.srv.JetStreamIsLeader()
	}
	return leader
}

// freePorts reserves n distinct free loopback ports. They are released
// before the servers bind them; another process could take one in
// between, which on a test machine is rare enough.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, 0, n)
	var lis []net.Listener
	defer func() {
		for _, l := range lis {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("free port: %v", err)
		}
		lis = append(lis, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}
