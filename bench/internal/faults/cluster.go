package faults

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pilotwire/pilotwire/pkg/bus"
)

// cluster is three nats-server processes clustered on loopback, each with
// its own JetStream store, so that a node can be killed with SIGKILL and
// started again on the same data.
type cluster struct {
	nodes []*natsNode
}

type natsNode struct {
	name    string
	client  string // host:port for clients
	monitor string // host:port of the monitoring endpoint (/healthz)
	p       *proc
}

// startCluster writes the three nodes' configs and starts them. Clients
// are not told the other nodes' addresses (no_advertise): each service
// gets the list it should use, so that a frontend behind the cut proxy
// cannot reach NATS around it.
func startCluster(exe, dir string, pt *ports, au *auth) (*cluster, error) {
	c := &cluster{}
	var routes []string
	type addrs struct{ client, cluster, monitor string }
	var as []addrs
	for range 3 {
		a := addrs{client: pt.take(), cluster: pt.take(), monitor: pt.take()}
		as = append(as, a)
		routes = append(routes, "nats-route://"+a.cluster)
	}
	for i, a := range as {
		name := fmt.Sprintf("nats-%d", i+1)
		store := filepath.Join(dir, name)
		if err := os.MkdirAll(store, 0o755); err != nil {
			return nil, err
		}
		conf := fmt.Sprintf(`server_name: %s
listen: %s
http: %s
max_payload: 8MB
jetstream {
  store_dir: %q
  max_memory_store: 256MB
  max_file_store: 4GB
}
cluster {
  name: pwfaults
  listen: %s
  routes: [%s]
  no_advertise: true
}
%s`, name, a.client, a.monitor, store, a.cluster, strings.Join(routes, ", "), au.serverConfig())
		path := filepath.Join(dir, name+".conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			return nil, err
		}
		n := &natsNode{name: name, client: a.client, monitor: a.monitor, p: &proc{
			name: name, exe: exe, args: []string{"-c", path}, logPath: filepath.Join(dir, name+".log"), env: au.env(),
		}}
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		if err := n.p.start(); err != nil {
			c.stop()
			return nil, err
		}
	}
	return c, nil
}

// urls is the comma-separated client URL list of every node.
func (c *cluster) urls() string {
	var us []string
	for _, n := range c.nodes {
		us = append(us, "nats://"+n.client)
	}
	return strings.Join(us, ",")
}

func (c *cluster) clientAddrs() []string {
	var out []string
	for _, n := range c.nodes {
		out = append(out, n.client)
	}
	return out
}

func (c *cluster) node(name string) *natsNode {
	for _, n := range c.nodes {
		if n.name == name {
			return n
		}
	}
	return nil
}

// waitHealthy waits until every running node's /healthz says ok: the node
// is connected, has a meta leader and its streams are current.
func (c *cluster) waitHealthy(ctx context.Context, timeout time.Duration) error {
	return poll(ctx, timeout, 50*time.Millisecond, func() (bool, error) {
		for _, n := range c.nodes {
			if !n.p.alive() {
				return false, fmt.Errorf("%s exited (see %s)", n.name, n.p.logPath)
			}
			if !httpOK("http://" + n.monitor + "/healthz") {
				return false, nil
			}
		}
		return true, nil
	})
}

func (c *cluster) stop() {
	for _, n := range c.nodes {
		n.p.stop(10 * time.Second)
	}
}

// streamNames are the streams and buckets of one mesh.
type streamSet struct {
	streams []jetstream.StreamConfig
	buckets []jetstream.KeyValueConfig
}

func meshStreams(names bus.Names, replicas int) streamSet {
	o := bus.StreamOptions{Replicas: replicas}
	return streamSet{
		streams: []jetstream.StreamConfig{names.ChangesConfig(o), names.PushesConfig(o), names.DeliveriesConfig(o)},
		buckets: []jetstream.KeyValueConfig{names.RegistryConfig(o), names.LeaseConfig(o)},
	}
}

// ensureStreams creates every stream and bucket with the services' own
// configs, retrying while the cluster elects its leaders.
func ensureStreams(ctx context.Context, js jetstream.JetStream, set streamSet, timeout time.Duration) error {
	var last error
	err := poll(ctx, timeout, 250*time.Millisecond, func() (bool, error) {
		last = nil
		for _, cfg := range set.streams {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := bus.EnsureStream(cctx, js, cfg)
			cancel()
			if err != nil {
				last = err
				return false, nil
			}
		}
		for _, cfg := range set.buckets {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := bus.EnsureKV(cctx, js, cfg)
			cancel()
			if err != nil {
				last = err
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("create streams: %w (last: %v)", err, last)
	}
	return nil
}

// streamLeader is the server leading a stream's raft group.
func streamLeader(ctx context.Context, js jetstream.JetStream, stream string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	s, err := js.Stream(cctx, stream)
	if err != nil {
		return "", err
	}
	info, err := s.Info(cctx)
	if err != nil {
		return "", err
	}
	if info.Cluster == nil || info.Cluster.Leader == "" {
		return "", errors.New("no leader")
	}
	return info.Cluster.Leader, nil
}

// streamsCurrent reports whether every replica of every stream is
// current (after a node came back).
func streamsCurrent(ctx context.Context, js jetstream.JetStream, set streamSet) (bool, error) {
	names := []string{}
	for _, s := range set.streams {
		names = append(names, s.Name)
	}
	for _, b := range set.buckets {
		names = append(names, "KV_"+b.Bucket)
	}
	for _, name := range names {
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		s, err := js.Stream(cctx, name)
		if err != nil {
			cancel()
			return false, nil
		}
		info, err := s.Info(cctx)
		cancel()
		if err != nil || info.Cluster == nil || info.Cluster.Leader == "" {
			return false, nil
		}
		if len(info.Cluster.Replicas) != 2 {
			return false, nil
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Offline {
				return false, nil
			}
		}
	}
	return true, nil
}

// connect opens the harness's own client connection to the cluster.
func connect(urls, password string) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect(urls, nats.Name("faults-harness"), nats.UserInfo("admin", password), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		return nil, nil, fmt.Errorf("connect %s: %w", urls, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}
