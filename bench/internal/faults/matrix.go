package faults

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/pilotwire/pilotwire/bench/internal/loadgen"
	"github.com/pilotwire/pilotwire/bench/internal/mesh"
	"github.com/pilotwire/pilotwire/bench/internal/xdsstate"
	"github.com/pilotwire/pilotwire/bench/internal/yamldir"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/xdsgen"
	"github.com/pilotwire/pilotwire/services/pusher"
)

// Options configure a run of the matrix.
type Options struct {
	// BinDir holds ingest, debouncer, pusher and ads (make build).
	BinDir string
	// NATSServer is the nats-server binary (the version in go.mod).
	NATSServer string
	// WorkDir receives the YAML directory, JetStream stores and logs.
	WorkDir string
	// Proxies is the number of simulated proxies (spread over the three
	// frontends); Changes the churn written over all faults.
	Proxies, Changes int
	// Mesh is the initial mesh; every AddEvery-th change adds a service,
	// the others move one endpoint.
	Mesh     mesh.Spec
	AddEvery int
	// Rate is the churn's changes per second.
	Rate float64
	// LeaseTTL of the debouncers, pushers and ingest.
	LeaseTTL time.Duration
	// Restart is how long a killed process stays down before it is
	// started again (a supervisor's restart delay); NATSDown the same for
	// a NATS node.
	Restart, NATSDown time.Duration
	// Cut is how long the last frontend is cut from NATS.
	Cut time.Duration
	// Target is the convergence goal per fault; ConvergeTimeout the give-up.
	Target, ConvergeTimeout time.Duration
	// Direct makes each third of the proxies dial its own frontend's
	// address, so a killed frontend's proxies wait for its restart through
	// their backoff. By default they dial one address in front of all
	// three (a Service: a connection goes to the next frontend that
	// accepts it), and reconnect to the others.
	Direct bool
	// Progress receives a line per step.
	Progress io.Writer
}

// DefaultOptions are the figures docs/reliability.md reports.
func DefaultOptions() Options {
	return Options{
		Proxies: 500, Changes: 1000,
		Mesh:     mesh.Spec{Services: 60, Endpoints: 3, Seed: 18},
		AddEvery: 25, Rate: 25,
		LeaseTTL: 3 * time.Second, Restart: time.Second, NATSDown: 3 * time.Second, Cut: 10 * time.Second,
		Target: 5 * time.Second, ConvergeTimeout: 90 * time.Second,
		Progress: io.Discard,
	}
}

// Row is what one fault cost.
type Row struct {
	Fault   string
	Changes int
	// Converge: from the later of the last change written and the fault's
	// end (process restarted, SIGCONT, node back, path restored) until
	// every proxy held the final configuration. FromFault: from the
	// fault's start.
	Converge, FromFault time.Duration
	Matched, Total      int
	Records             recordCheck
	Pushes              pushCheck
	// Frontend and service counters over the phase.
	Older, Repeated, Fenced, DebounceFenced, LostPushes float64
	// LostBy splits LostPushes by the pusher's reason label.
	LostBy map[string]float64
	Note   string
	Err    string
}

func lostSeries(reason string) string {
	return `pilotwire_pusher_lost_pushes_total{reason="` + reason + `"}`
}

// OK reports whether the row meets the correctness targets (time aside).
func (r Row) OK() bool {
	return r.Err == "" && r.Matched == r.Total && r.Records.ok() && r.Pushes.ok() && r.Older == 0
}

// Result is a whole run.
type Result struct {
	Options Options
	Startup time.Duration // services ready to every proxy in sync
	Rows    []Row
	Notes   []string
}

// fault is one step of the matrix. inject runs during the churn and
// returns when the fault has ended (healed: the time it ended).
type fault struct {
	name   string
	inject func(ctx context.Context, s *system, ph *phase) (healed time.Time, note string, err error)
}

// phase is the bookkeeping of one fault.
type phase struct {
	index       int
	fe, svc     *counters
	ingestDown  *downWindow
	changesFrom uint64
}

// Run runs the matrix.
func Run(ctx context.Context, o Options) (*Result, error) {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	res := &Result{Options: o}
	names, err := bus.NewNames(bus.DefaultPrefix)
	if err != nil {
		return nil, err
	}
	s := &system{o: o, names: names, set: meshStreams(names, 3), dir: filepath.Join(o.WorkDir, "mesh")}
	for _, d := range []string{s.dir, filepath.Join(o.WorkDir, "logs"), filepath.Join(o.WorkDir, "nats")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	if s.pt, err = newPorts(40); err != nil {
		return nil, err
	}
	defer s.stop()
	say := func(format string, args ...any) {
		fmt.Fprintf(o.Progress, "%s  %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}

	if s.auth, err = newAuth(filepath.Join(o.WorkDir, "creds"), names); err != nil {
		return nil, err
	}
	say("starting three nats-server nodes (one account, a least-privilege user per service)")
	if s.cl, err = startCluster(o.NATSServer, filepath.Join(o.WorkDir, "nats"), s.pt, s.auth); err != nil {
		return nil, err
	}
	if err := s.cl.waitHealthy(ctx, 60*time.Second); err != nil {
		return nil, fmt.Errorf("cluster: %w", err)
	}
	if s.nc, s.js, err = connect(s.cl.urls(), s.auth.passwords["admin"]); err != nil {
		return nil, err
	}
	if err := ensureStreams(ctx, s.js, s.set, 60*time.Second); err != nil {
		return nil, err
	}
	res.Notes = append(res.Notes,
		"streams and buckets created by the harness at 3 replicas before the services start, so every run begins from the same declared configuration (services started on a cluster still electing wait for it: e2e TestStartBeforeClusterElects)",
		"every service logs in as its own NATS user with only the subjects pkg/bus grants it (the accounts block of deploy/nats/accounts.conf, with the matrix's ids)")
	if s.cut, err = newCutProxy(s.pt.take(), s.cl.clientAddrs()); err != nil {
		return nil, err
	}
	if o.Direct {
		res.Notes = append(res.Notes, "each third of the proxies dials its own frontend's address (--direct): a killed frontend's proxies wait for its restart through their backoff")
	} else {
		res.Notes = append(res.Notes, "the proxies dial one address in front of the three frontends, as a Kubernetes Service: a new connection goes to the next frontend in turn that accepts it (--direct: each dials its own)")
	}
	ch, err := newChurn(s.dir, o.Mesh, o.AddEvery)
	if err != nil {
		return nil, err
	}
	say("starting ingest, 2 debouncers, 2 pushers, 3 frontends")
	start := time.Now()
	if err := s.startServices(ctx); err != nil {
		return nil, err
	}
	if err := s.startFleets(ctx); err != nil {
		return nil, err
	}
	if m, total, last, err := s.converge(ctx, 1); err != nil || m < total {
		return nil, fmt.Errorf("initial sync: %d of %d proxies (%v)", m, total, err)
	} else {
		res.Startup = time.Unix(0, last).Sub(start)
	}
	say("%d proxies in sync after %s", o.Proxies, res.Startup.Round(time.Millisecond))

	faults := matrix(o)
	per := o.Changes / len(faults)
	var downs []downWindow
	type span struct{ from, to uint64 }
	spans := make([]span, len(faults))
	fe := newCounters(`pilotwire_ads_push_orders_not_newer_total{kind="older"}`, `pilotwire_ads_push_orders_not_newer_total{kind="repeated"}`, `pilotwire_ads_push_orders_total{result="FENCED"}`)
	svcNames := []string{"pilotwire_debounce_fenced_total", "pilotwire_pusher_lost_pushes_total"}
	for _, r := range pusher.LostReasons {
		svcNames = append(svcNames, lostSeries(r))
	}
	svc := newCounters(svcNames...)
	for i, f := range faults {
		n := per
		if i == len(faults)-1 {
			n = o.Changes - per*(len(faults)-1)
		}
		ph := &phase{index: i, fe: fe, svc: svc}
		fe.sample(ctx, s.frontends...)
		svc.sample(ctx, append(append([]*proc{}, s.debouncers...), s.pushers...)...)
		fe0, svc0 := fe.snapshot(), svc.snapshot()
		if ph.changesFrom, err = s.lastSeq(ctx, names.ChangesStream()); err != nil {
			return nil, err
		}
		say("fault %d: %s (%d changes)", i, f.name, n)
		row := Row{Fault: f.name, Changes: n}
		faultAt, healed, lastWrite, note, ferr := s.runPhase(ctx, ch, ph, f, n)
		row.Note = note
		if ferr != nil {
			row.Err = ferr.Error()
		}
		if ph.ingestDown != nil {
			downs = append(downs, *ph.ingestDown)
		}
		ref := lastWrite
		if healed.After(ref) {
			ref = healed
		}
		m, total, last, cerr := s.converge(ctx, int64(i+2)) // target ids from 1: a proxy's zero match id means none
		row.Matched, row.Total = m, total
		// A service that exited on its own is the first thing to read
		// about (the harness restarts only what it killed).
		if gone := s.exited(); gone != "" {
			row.Err = strings.TrimSuffix(gone+"; "+row.Err, "; ")
		}
		if cerr != nil && row.Err == "" {
			row.Err = cerr.Error()
		}
		if m == total {
			row.Converge = time.Unix(0, last).Sub(ref)
			row.FromFault = time.Unix(0, last).Sub(faultAt)
		}
		to, err := s.waitPushed(ctx)
		if err != nil && row.Err == "" {
			row.Err = err.Error()
		}
		spans[i] = span{ph.changesFrom, to}
		fe.sample(ctx, s.frontends...)
		svc.sample(ctx, append(append([]*proc{}, s.debouncers...), s.pushers...)...)
		fe1, svc1 := fe.snapshot(), svc.snapshot()
		row.Older = fe1[fe.names[0]] - fe0[fe.names[0]]
		row.Repeated = fe1[fe.names[1]] - fe0[fe.names[1]]
		row.Fenced = fe1[fe.names[2]] - fe0[fe.names[2]]
		row.DebounceFenced = svc1[svc.names[0]] - svc0[svc.names[0]]
		row.LostPushes = svc1[svc.names[1]] - svc0[svc.names[1]]
		for _, r := range pusher.LostReasons {
			if d := svc1[lostSeries(r)] - svc0[lostSeries(r)]; d > 0 {
				if row.LostBy == nil {
					row.LostBy = make(map[string]float64)
				}
				row.LostBy[r] = d
			}
		}
		say("  converged %d/%d, %s after the fault ended (%s after it began)%s", m, total,
			row.Converge.Round(time.Millisecond), row.FromFault.Round(time.Millisecond), errSuffix(row.Err))
		res.Rows = append(res.Rows, row)
		// Let the cluster heal fully before the next fault.
		if err := s.healCluster(ctx); err != nil {
			return res, err
		}
	}

	say("checking the change and push streams")
	changes, err := readStream(ctx, s.js, names.ChangesStream())
	if err != nil {
		return res, err
	}
	recs, err := checkRecords(changes, ch, downs, len(faults))
	if err != nil {
		return res, err
	}
	pushes, err := readStream(ctx, s.js, names.PushesStream())
	if err != nil {
		return res, err
	}
	if !recs[0].ok() {
		res.Notes = append(res.Notes, fmt.Sprintf("records of the initial mesh: %+v", recs[0]))
	}
	for i := range res.Rows {
		res.Rows[i].Records = recs[i+1]
		if res.Rows[i].Pushes, err = checkPushes(pushes, spans[i].from, spans[i].to); err != nil {
			return res, err
		}
	}
	return res, nil
}

func errSuffix(e string) string {
	if e == "" {
		return ""
	}
	return "; error: " + e
}

// runPhase writes n changes at the configured rate and injects the fault
// at 60% of them; it returns when both are done.
func (s *system) runPhase(ctx context.Context, ch *churn, ph *phase, f fault, n int) (faultAt, healed, lastWrite time.Time, note string, err error) {
	interval := time.Duration(float64(time.Second) / s.o.Rate)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	type injected struct {
		healed time.Time
		note   string
		err    error
	}
	done := make(chan injected, 1)
	at := n * 6 / 10
	for k := range n {
		if k == at {
			faultAt = time.Now()
			go func() {
				h, note, err := f.inject(ctx, s, ph)
				done <- injected{h, note, err}
			}()
		}
		if err := ch.step(ph.index); err != nil {
			return faultAt, healed, lastWrite, "", err
		}
		lastWrite = time.Now()
		select {
		case <-ctx.Done():
			return faultAt, healed, lastWrite, "", ctx.Err()
		case <-tick.C:
		}
	}
	r := <-done
	return faultAt, r.healed, lastWrite, r.note, r.err
}

// converge sets the expected configuration of the directory as every
// fleet's target and waits; it returns the proxies matched and the unix
// ns of the last one's ACK.
func (s *system) converge(ctx context.Context, id int64) (matched, total int, last int64, err error) {
	store, err := yamldir.Load(s.dir, "Kubernetes")
	if err != nil {
		return 0, 0, 0, err
	}
	cfg, err := xdsstate.Expected(store.Snapshot(), xdsgen.Envoy)
	if err != nil {
		return 0, 0, 0, err
	}
	t := loadgen.Target{ID: id, State: cfg.State()}
	for _, f := range s.fleets {
		_ = f.SetTarget(ctx, t)
	}
	deadline := time.Now().Add(s.o.ConvergeTimeout)
	var unmatched []string
	for _, f := range s.fleets {
		r, err := f.Wait(ctx, time.Until(deadline))
		if err != nil {
			return matched, total, last, err
		}
		matched += r.Matched
		total += r.Total
		for _, pt := range r.Times {
			last = max(last, pt.Ack)
		}
		unmatched = append(unmatched, r.Sample...)
	}
	if matched < total {
		return matched, total, last, fmt.Errorf("%d proxies not on the final configuration after %s (e.g. %v)", total-matched, s.o.ConvergeTimeout, unmatched)
	}
	return matched, total, last, nil
}

// waitPushed waits until PUSHES covers the change stream's last sequence
// and returns that sequence.
func (s *system) waitPushed(ctx context.Context) (uint64, error) {
	last, err := s.lastSeq(ctx, s.names.ChangesStream())
	if err != nil {
		return 0, err
	}
	// Each try reads only the last PushRequest, with a short bound: a
	// stream read through a consumer could spend the whole wait on one
	// try while the cluster settles after a node loss (seen: one read
	// held 30 s after the node came back, although PUSHES held the
	// request, as the matrix's final check found). A try that fails is
	// retried, and the last failure is in the error.
	var lastErr error
	err = poll(ctx, 30*time.Second, 100*time.Millisecond, func() (bool, error) {
		tctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		m, err := lastMsg(tctx, s.js, s.names.PushesStream())
		if err != nil {
			lastErr = err
			return false, nil
		}
		if m == nil {
			return false, nil
		}
		through, err := throughOf(*m)
		if err != nil {
			return false, err
		}
		return through >= last, nil
	})
	if err != nil {
		if lastErr != nil {
			err = fmt.Errorf("%w; last read: %v", err, lastErr)
		}
		return last, fmt.Errorf("PUSHES never reached change %d: %w", last, err)
	}
	return last, nil
}

// healCluster waits until every NATS node is up and every stream replica
// current.
func (s *system) healCluster(ctx context.Context) error {
	if err := s.cl.waitHealthy(ctx, 60*time.Second); err != nil {
		return fmt.Errorf("cluster did not heal: %w", err)
	}
	return poll(ctx, 60*time.Second, 100*time.Millisecond, func() (bool, error) {
		return streamsCurrent(ctx, s.js, s.set)
	})
}

// killAndRestart kills p with SIGKILL and starts it again after the
// restart delay; it returns the restart time.
func (s *system) killAndRestart(ctx context.Context, p *proc, c *counters) (time.Time, error) {
	if c != nil {
		c.sample(ctx, p)
	}
	if err := p.kill(); err != nil {
		return time.Time{}, err
	}
	if c != nil {
		c.restarted(p)
	}
	if err := sleepCtx(ctx, s.o.Restart); err != nil {
		return time.Time{}, err
	}
	at := time.Now()
	if err := p.start(); err != nil {
		return at, err
	}
	return at, p.waitReady(ctx, 60*time.Second)
}

// sleepCtx is the fault's own duration (a process down, paused or cut
// for this long), not a wait for state.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// matrix is the list of faults, in order.
func matrix(o Options) []fault {
	return []fault{
		{"none (baseline)", func(context.Context, *system, *phase) (time.Time, string, error) {
			return time.Now(), "", nil
		}},
		{"kill -9 ingest", func(ctx context.Context, s *system, ph *phase) (time.Time, string, error) {
			from := time.Now()
			at, err := s.killAndRestart(ctx, s.ingest, nil)
			if err != nil {
				return at, "", err
			}
			ready := time.Since(at)
			// Down until the new process writes again (it holds the lease).
			err = poll(ctx, 30*time.Second, 20*time.Millisecond, func() (bool, error) {
				m, err := metrics(ctx, s.ingest.http)
				return err == nil && m["pilotwire_ingest_writer_active"] >= 1, nil
			})
			ph.ingestDown = &downWindow{from: from, to: time.Now()}
			return at, fmt.Sprintf("down %s; ready %s and writing %s after the restart", at.Sub(from).Round(time.Millisecond),
				ready.Round(time.Millisecond), ph.ingestDown.to.Sub(at).Round(time.Millisecond)), err
		}},
		{"kill -9 active debouncer", func(ctx context.Context, s *system, ph *phase) (time.Time, string, error) {
			return s.killActive(ctx, "debouncer", s.debouncers, ph.svc)
		}},
		{"kill -9 active pusher", func(ctx context.Context, s *system, ph *phase) (time.Time, string, error) {
			return s.killActive(ctx, "pusher-0", s.pushers, ph.svc)
		}},
		{"kill -9 one ADS frontend", func(ctx context.Context, s *system, ph *phase) (time.Time, string, error) {
			at, err := s.killAndRestart(ctx, s.frontends[0], ph.fe)
			if s.o.Direct {
				return at, "fe-1 (a third of the proxies reconnect to it)", err
			}
			return at, "fe-1 (its proxies reconnect to the others through the Service address)", err
		}},
		{"kill -9 one NATS node", func(ctx context.Context, s *system, _ *phase) (time.Time, string, error) {
			leader, _ := streamLeader(ctx, s.js, s.names.ChangesStream())
			var n *natsNode
			for _, c := range s.cl.nodes {
				if c.name != leader {
					n = c
					break
				}
			}
			return s.killNode(ctx, n)
		}},
		{"kill -9 the PW_CHANGES leader", func(ctx context.Context, s *system, _ *phase) (time.Time, string, error) {
			leader, err := streamLeader(ctx, s.js, s.names.ChangesStream())
			if err != nil {
				return time.Now(), "", err
			}
			return s.killNode(ctx, s.cl.node(leader))
		}},
		{"SIGSTOP active debouncer past TTL", func(ctx context.Context, s *system, ph *phase) (time.Time, string, error) {
			return s.pauseActive(ctx, "debouncer", s.debouncers, ph.svc)
		}},
		{"SIGSTOP active pusher past TTL", func(ctx context.Context, s *system, ph *phase) (time.Time, string, error) {
			return s.pauseActive(ctx, "pusher-0", s.pushers, ph.svc)
		}},
		{"cut one frontend from NATS", func(ctx context.Context, s *system, _ *phase) (time.Time, string, error) {
			s.cut.setCut(true)
			err := sleepCtx(ctx, o.Cut)
			s.cut.setCut(false)
			return time.Now(), fmt.Sprintf("fe-3 cut %s", o.Cut), err
		}},
	}
}

// killActive kills the lease holder of key and restarts it (as standby).
func (s *system) killActive(ctx context.Context, key string, ps []*proc, c *counters) (time.Time, string, error) {
	p, err := s.active(ctx, key, ps)
	if err != nil {
		return time.Now(), "", err
	}
	at, err := s.killAndRestart(ctx, p, c)
	var next string
	_ = poll(ctx, 3*s.o.LeaseTTL, 50*time.Millisecond, func() (bool, error) {
		h, herr := s.holder(ctx, key)
		next = h
		return herr == nil && h != p.name, nil
	})
	return at, fmt.Sprintf("%s killed; lease then held by %s", p.name, next), err
}

// pauseActive stops the lease holder of key with SIGSTOP for the lease
// TTL and 2 s more, then resumes it with SIGCONT: a standby has taken
// over meanwhile, and the resumed ex-holder's late writes must be fenced.
func (s *system) pauseActive(ctx context.Context, key string, ps []*proc, c *counters) (time.Time, string, error) {
	p, err := s.active(ctx, key, ps)
	if err != nil {
		return time.Now(), "", err
	}
	c.sample(ctx, p)
	if err := p.signal(syscall.SIGSTOP); err != nil {
		return time.Now(), "", err
	}
	stopped := s.o.LeaseTTL + 2*time.Second
	err = sleepCtx(ctx, stopped)
	next, _ := s.holder(ctx, key)
	at := time.Now()
	if cerr := p.signal(syscall.SIGCONT); err == nil {
		err = cerr
	}
	return at, fmt.Sprintf("%s stopped %s; lease held by %s at SIGCONT", p.name, stopped, next), err
}

// killNode kills a NATS node, waits NATSDown and starts it again.
func (s *system) killNode(ctx context.Context, n *natsNode) (time.Time, string, error) {
	if n == nil {
		return time.Now(), "", errors.New("no node to kill")
	}
	killed := time.Now()
	if err := n.p.kill(); err != nil {
		return killed, "", err
	}
	var leader string
	elected := poll(ctx, 30*time.Second, 50*time.Millisecond, func() (bool, error) {
		l, err := streamLeader(ctx, s.js, s.names.ChangesStream())
		leader = l
		return err == nil && l != n.name, nil
	})
	electedIn := time.Since(killed)
	if err := sleepCtx(ctx, max(0, s.o.NATSDown-electedIn)); err != nil {
		return killed, "", err
	}
	at := time.Now()
	if err := n.p.start(); err != nil {
		return at, "", err
	}
	note := fmt.Sprintf("%s down %s; PW_CHANGES leader %s", n.name, at.Sub(killed).Round(time.Millisecond), leader)
	if elected != nil {
		note += " (no leader elected: " + elected.Error() + ")"
	} else {
		note += fmt.Sprintf(" after %s", electedIn.Round(time.Millisecond))
	}
	return at, note, nil
}
