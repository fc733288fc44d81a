package faults

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pilotwire/pilotwire/bench/internal/loadgen"
	"github.com/pilotwire/pilotwire/pkg/bus"
)

// system is everything the matrix runs: the cluster, the services, the
// cut proxy in front of the last frontend's NATS connection, and one
// fleet of proxies per frontend.
type system struct {
	o     Options
	names bus.Names
	set   streamSet
	dir   string // the YAML directory ingest watches
	pt    *ports
	auth  *auth

	cl         *cluster
	cut        *cutProxy
	lb         *cutProxy // the proxies' address of the frontends (nil: --direct)
	nc         *nats.Conn
	js         jetstream.JetStream
	ingest     *proc
	debouncers []*proc
	pushers    []*proc
	frontends  []*proc
	fleets     []*loadgen.Fleet
}

// exited names the service processes that are not running, with their
// logs ("" when all are).
func (s *system) exited() string {
	var gone []string
	for _, p := range s.all() {
		if !p.alive() {
			gone = append(gone, fmt.Sprintf("%s exited (see %s)", p.name, p.logPath))
		}
	}
	return strings.Join(gone, "; ")
}

// service builds a service process; natsURL is its NATS URL list.
func (s *system) service(bin, id, natsURL string, extra ...string) *proc {
	http := s.pt.take()
	// Its own debug port: the default (the HTTP port + 100) may be another
	// service's HTTP port here.
	args := []string{"--nats-url", natsURL, "--http-addr", http, "--debug-addr", s.pt.take(), "--replicas", "3", "--log-level", "info"}
	args = append(args, s.auth.args(id)...)
	args = append(args, extra...)
	return &proc{
		name: id, exe: filepath.Join(s.o.BinDir, bin), args: args,
		logPath: filepath.Join(s.o.WorkDir, "logs", id+".log"), http: http,
	}
}

// startServices starts every service and waits until each is ready.
func (s *system) startServices(ctx context.Context) error {
	ttl := s.o.LeaseTTL.String()
	urls := s.cl.urls()
	s.ingest = s.service("ingest", "ingest-1", urls, "--config-dir", s.dir, "--id", "ingest-1", "--lease-ttl", ttl)
	for _, id := range []string{"debouncer-a", "debouncer-b"} {
		s.debouncers = append(s.debouncers, s.service("debouncer", id, urls, "--id", id, "--lease-ttl", ttl))
	}
	for _, id := range []string{"pusher-a", "pusher-b"} {
		s.pushers = append(s.pushers, s.service("pusher", id, urls, "--id", id, "--lease-ttl", ttl))
	}
	for i := range 3 {
		id := fmt.Sprintf("fe-%d", i+1)
		url := urls
		if i == 2 {
			url = "nats://" + s.cut.addr()
		}
		s.frontends = append(s.frontends, s.service("ads", id, url, "--frontend-id", id, "--ads-addr", s.pt.take()))
	}
	all := s.all()
	for _, p := range all {
		if err := p.start(); err != nil {
			return err
		}
	}
	for _, p := range all {
		if err := p.waitReady(ctx, 90*time.Second); err != nil {
			return fmt.Errorf("%s not ready: %w", p.name, err)
		}
	}
	return nil
}

func (s *system) all() []*proc {
	out := []*proc{s.ingest}
	out = append(out, s.debouncers...)
	out = append(out, s.pushers...)
	return append(out, s.frontends...)
}

// adsAddr is a frontend's --ads-addr.
func adsAddr(p *proc) string {
	for i, a := range p.args {
		if a == "--ads-addr" {
			return p.args[i+1]
		}
	}
	return ""
}

// startFleets connects the proxies, spread evenly over the frontends.
func (s *system) startFleets(ctx context.Context) error {
	if !s.o.Direct {
		var addrs []string
		for _, fe := range s.frontends {
			addrs = append(addrs, adsAddr(fe))
		}
		var err error
		if s.lb, err = newBalancer(s.pt.take(), addrs); err != nil {
			return err
		}
	}
	first := 0
	for i, fe := range s.frontends {
		n := s.o.Proxies / len(s.frontends)
		if i < s.o.Proxies%len(s.frontends) {
			n++
		}
		addr := adsAddr(fe)
		if s.lb != nil {
			addr = s.lb.addr()
		}
		f, err := loadgen.New(loadgen.Options{Addr: addr, Proxies: n, First: first})
		if err != nil {
			return err
		}
		first += n
		s.fleets = append(s.fleets, f)
		if err := f.Start(ctx); err != nil {
			return err
		}
	}
	return nil
}

// holder is the instance holding a lease.
func (s *system) holder(ctx context.Context, key string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	kv, err := s.js.KeyValue(cctx, s.names.LeaseBucket())
	if err != nil {
		return "", err
	}
	e, err := kv.Get(cctx, key)
	if err != nil {
		return "", fmt.Errorf("lease %s: %w", key, err)
	}
	return string(e.Value()), nil
}

// active is the process holding a lease.
func (s *system) active(ctx context.Context, key string, ps []*proc) (*proc, error) {
	h, err := s.holder(ctx, key)
	if err != nil {
		return nil, err
	}
	for _, p := range ps {
		if strings.Contains(h, p.name) {
			return p, nil
		}
	}
	return nil, fmt.Errorf("lease %s held by %q, none of ours", key, h)
}

// lastSeq is a stream's last sequence.
func (s *system) lastSeq(ctx context.Context, stream string) (uint64, error) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := s.js.Stream(cctx, stream)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(cctx)
	if err != nil {
		return 0, err
	}
	return info.State.LastSeq, nil
}

func (s *system) stop() {
	for _, f := range s.fleets {
		_ = f.Close()
	}
	if s.lb != nil {
		s.lb.close()
	}
	for _, p := range s.all() {
		if p != nil {
			p.stop(15 * time.Second)
		}
	}
	if s.nc != nil {
		s.nc.Close()
	}
	if s.cut != nil {
		s.cut.close()
	}
	if s.cl != nil {
		s.cl.stop()
	}
}

// counters follows counter metrics of a set of processes across their
// restarts: a sample adds what grew since the last one.
type counters struct {
	names []string
	last  map[*proc]map[string]float64
	total map[string]float64
}

func newCounters(names ...string) *counters {
	return &counters{names: names, last: make(map[*proc]map[string]float64), total: make(map[string]float64)}
}

// sample scrapes ps (those that answer) and adds their growth.
func (c *counters) sample(ctx context.Context, ps ...*proc) {
	for _, p := range ps {
		if !p.alive() {
			continue
		}
		m, err := metrics(ctx, p.http)
		if err != nil {
			continue
		}
		prev := c.last[p]
		if prev == nil {
			prev = make(map[string]float64)
			c.last[p] = prev
		}
		for _, n := range c.names {
			if v := m[n]; v >= prev[n] {
				c.total[n] += v - prev[n]
				prev[n] = v
			} else { // restarted since
				c.total[n] += v
				prev[n] = v
			}
		}
	}
}

// restarted forgets a process's last values (it starts again from zero).
func (c *counters) restarted(p *proc) { delete(c.last, p) }

// snapshot returns the totals so far.
func (c *counters) snapshot() map[string]float64 {
	out := make(map[string]float64, len(c.total))
	for k, v := range c.total {
		out[k] = v
	}
	return out
}
