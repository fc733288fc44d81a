package ads

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/experimental"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
	"github.com/pilotwire/pilotwire/pkg/model"
	"github.com/pilotwire/pilotwire/pkg/svc"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// DefaultFrontendID is <hostname>-<8 hex>.
func DefaultFrontendID() string {
	h, _ := os.Hostname()
	if h == "" {
		h = "ads"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return h + "-" + hex.EncodeToString(b[:])
}

// recvStreamWindow and recvConnWindow are the frontend's HTTP/2 receive
// windows, per stream and per connection: what a client may send before
// the frontend reads it. A quarter of a window read is given back at once,
// so a request as large as the 4 MiB one may be crosses in a few
// round trips; grpc-go's estimate, which these replace, could grow a
// connection's window to 16 MiB.
const (
	recvStreamWindow = 1 << 20
	recvConnWindow   = 2 << 20
)

// Run runs the frontend until ctx ends, then drains.
func Run(ctx context.Context, cfg Config, d svc.Deps) error {
	names, err := cfg.Names()
	if err != nil {
		return err
	}
	if cfg.FrontendID == "" {
		cfg.FrontendID = DefaultFrontendID()
	}
	cfg = cfg.withDefaults()
	log := d.Log.With("frontend", cfg.FrontendID)
	opts := cfg.StreamOptions()
	streams := svc.NewStreams(d)
	if _, err := streams.Stream(ctx, names.ChangesConfig(opts)); err != nil {
		return err
	}
	if cfg.RecordDeliveries {
		if _, err := streams.Stream(ctx, names.DeliveriesConfig(opts)); err != nil {
			return err
		}
	}
	kv, err := streams.KV(ctx, names.RegistryConfig(opts))
	if err != nil {
		return err
	}

	meshCfg, err := meshconfig.Load(cfg.MeshConfigPath)
	if err != nil {
		return err
	}
	m := newMetrics(d.Reg)
	gate := newSeqGate()
	store := model.NewStore(model.WithMeshConfig(meshCfg))
	if cfg.onStore != nil {
		cfg.onStore(store)
	}
	s := &Server{
		id:      cfg.FrontendID,
		store:   store,
		meshes:  store,
		log:     log,
		metrics: m,
		drainCh: make(chan struct{}),
		conns:   make(map[string]*conn),
		// A frontend killed with SIGKILL leaves its connections' entries
		// and the pusher's in-flight orders for them behind: a restarted
		// one must not reuse their ids.
		incarnation: strconv.FormatInt(time.Now().UnixMilli(), 36),

		meshConfig:   meshCfg,
		debugAuthOff: cfg.DisableDebugEndpointAuth,
		debugSlot:    newDebugGate(),
		limits: streamLimits{
			maxNames:     cfg.MaxResourceNames,
			requestRate:  cfg.RequestRate,
			requestBurst: cfg.RequestBurst,
			sendTimeout:  cfg.SendTimeout,
		},
	}
	if d.Debug != nil {
		s.registerDebug(d.Debug.Handle)
	}
	if s.sds, err = startSDS(cfg, d, log); err != nil {
		return err
	}
	if cfg.RecordDeliveries {
		s.recorder = newRecorder(d.JS, names, cfg.FrontendID, log, m)
	}
	s.orders = newOrderRouter(d.NC, s, gate, log)
	s.reports = s.orders
	d.Reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pilotwire_ads_order_batches_queued", Help: "Push order batches received and not yet dispatched to connections.",
	}, func() float64 { return float64(len(s.orders.batches)) }))
	s.registry = &registry{
		kv: kv,
		js: d.JS,
		fe: &pb.FrontendInfo{
			Id:            cfg.FrontendID,
			OrdersSubject: names.OrdersSubject(cfg.FrontendID),
			AdsAddr:       cfg.ADSAddr,
			StartedAt:     timestamppb.Now(),
		},
		interval:  cfg.HeartbeatInterval,
		log:       log,
		metrics:   m,
		notify:    make(chan struct{}, 1),
		dirty:     make(map[string]*pb.ConnectionInfo),
		connCount: s.connCount,
		ownConns:  s.id + "-" + s.incarnation + "-",
		applied:   gate.get,
		pushRate:  func() float64 { return s.orders.meter.sample(time.Now()) },
		all:       s.connInfos,
		kick:      make(chan struct{}, 1),
	}
	if d.NC != nil {
		nc := d.NC
		s.registry.reconnects = func() uint64 { return nc.Stats().Reconnects }
		defer svc.OnReconnect(nc, s.registry.reconnected)()
	}

	// The model first: no stream is served from a model that is behind the
	// history as it stood at start-up.
	f := newFollower(d.JS, names, store, gate, log, m)
	f.fullReplay, f.ignoreSnapshots = cfg.fullReplay, cfg.ignoreSnapshots
	d.Reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "pilotwire_ads_change_records_queued", Help: "Change records received and not yet applied to the model, waiting to be decoded or decoded.",
	}, func() float64 { return float64(f.queued()) }))
	restoreGC := raiseGCPercent(cfg.BootstrapGOGC)
	f.heap = newBootHeap(cfg.BootstrapHeap, log, m.bootstrapBallast.Set)
	if cfg.bootHeapOptions != nil {
		cfg.bootHeapOptions(f.heap)
	}
	// Put back once ready: the collector's first cycle over the new model
	// runs beside the first streams, not before the frontend serves.
	restoreBoot := sync.OnceFunc(func() { f.heap.done(); restoreGC() })
	defer restoreBoot()
	stopFollow, err := f.start(ctx)
	if err != nil {
		return err
	}
	defer stopFollow()

	lis, err := net.Listen("tcp", cfg.ADSAddr)
	if err != nil {
		return fmt.Errorf("listen ads %s: %w", cfg.ADSAddr, err)
	}
	var creds []grpc.ServerOption
	if cfg.TLSCert != "" || cfg.TLSKey != "" {
		tc, err := tlsConfig(cfg.TLSCert, cfg.TLSKey, cfg.ClientCA)
		if err != nil {
			lis.Close()
			return err
		}
		creds = append(creds, grpc.Creds(credentials.NewTLS(tc)))
		if cfg.ClientCA != "" {
			s.identity = &identityCheck{trustDomain: cfg.TrustDomain}
		}
	} else if cfg.ClientCA != "" {
		lis.Close()
		return fmt.Errorf("--client-ca needs --tls-cert and --tls-key")
	}
	var limiter *rate.Limiter
	if cfg.NewStreamRate > 0 {
		limiter = rate.NewLimiter(rate.Limit(cfg.NewStreamRate), max(cfg.NewStreamBurst, 1))
	}
	s.admission = newAdmission(cfg.syncingStreams(), cfg.AdmissionWait, cfg.AdmissionHold, cfg.MaxWaitingStreams, limiter, m)
	pool := newResponseBufferPool()
	gs := grpc.NewServer(append(creds,
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionAge:      cfg.MaxConnectionAge,
			MaxConnectionAgeGrace: cfg.DrainDuration,
			Time:                  30 * time.Second,
			Timeout:               10 * time.Second,
		}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 15 * time.Second, PermitWithoutStream: true}),
		grpc.MaxRecvMsgSize(4<<20),
		// Fixed receive windows: without them grpc-go estimates each
		// connection's bandwidth-delay product from what it receives,
		// answering nearly every request (each ACK) with a window update
		// and a PING of its own, whose PING ACK it then reads. A frontend
		// receives only requests, so the estimate buys it nothing. What it
		// sends is paced by the client's windows, which this does not set.
		grpc.StaticStreamWindowSize(recvStreamWindow),
		grpc.StaticConnWindowSize(recvConnWindow),
		experimental.BufferPool(pool),
		grpc.ForceServerCodecV2(poolCodec{pool: pool, names: newNameTable()}),
	)...)
	s.register(gs)

	var wg sync.WaitGroup
	runCtx, cancelRun := context.WithCancel(context.Background())
	defer cancelRun()
	wg.Add(4)
	go func() { defer wg.Done(); s.registry.removeStale(runCtx) }()
	go func() { defer wg.Done(); s.orders.run(runCtx) }()
	go func() { defer wg.Done(); s.orders.flushDones(runCtx) }()
	go func() { defer wg.Done(); s.registry.run(runCtx) }()
	if s.sds != nil {
		wg.Add(1)
		go func() { defer wg.Done(); s.sds.run(runCtx) }()
	}
	if err := s.orders.subscribe(names.OrdersSubject(cfg.FrontendID)); err != nil {
		cancelRun()
		wg.Wait()
		return fmt.Errorf("subscribe orders: %w", err)
	}
	serveErr := make(chan error, 1)
	wg.Add(1)
	go func() { defer wg.Done(); serveErr <- gs.Serve(lis) }()
	addr := lis.Addr().String()
	d.Health.SetReady()
	log.Info("ads ready", "addr", addr, "seq", gate.get())
	restoreBoot()
	if cfg.OnListen != nil {
		cfg.OnListen(addr)
	}

	select {
	case <-ctx.Done():
	case err = <-serveErr:
		log.Error("grpc serve", "err", err)
	}
	// Drain: stop accepting, tell the registry, give clients time to move,
	// then end the remaining streams and stop.
	d.Health.SetNotReady("draining")
	s.registry.setDraining()
	stopped := make(chan struct{})
	go func() { gs.GracefulStop(); close(stopped) }()
	if cfg.DrainDuration > 0 && s.connCount() > 0 {
		t := time.NewTimer(cfg.DrainDuration)
		select {
		case <-t.C:
		case <-stopped:
		}
		t.Stop()
	}
	s.drain()
	// Streams ended by drain return at once; a handler stuck in a send
	// gets 5 s before the server is stopped hard.
	hard := time.NewTimer(5 * time.Second)
	select {
	case <-stopped:
	case <-hard.C:
		log.Warn("streams still open 5 s after the drain: stopping hard")
		gs.Stop()
		<-stopped
	}
	hard.Stop()
	if s.recorder != nil {
		s.recorder.close(2 * time.Second)
	}
	s.orders.unsubscribe()
	cancelRun()
	wg.Wait()
	return err
}
