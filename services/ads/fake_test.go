package ads

import (
	"io"
	"log/slog"
	"sync"
	"testing"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/pkg/model"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// fakeSotW is a state-of-the-world stream with no transport below it. It
// keeps what the connection sends until the test takes it; it is never read
// from: tests hand requests to the connection's handlers themselves.
type fakeSotW struct {
	sent    []*discovery.DiscoveryResponse
	sendErr error // returned by Send when set
	recvErr error // returned by Recv; io.EOF when unset
}

// SendMsg takes what the connection sends through the server's codec, as
// the gRPC stream does, and keeps the DiscoveryResponse a client decodes.
func (f *fakeSotW) SendMsg(m any) error {
	if f.sendErr != nil {
		return f.sendErr
	}
	r, err := throughCodec(m)
	if err != nil {
		return err
	}
	f.sent = append(f.sent, r)
	return nil
}

// throughCodec encodes m with the server's codec and decodes the bytes as a
// client would.
func throughCodec(m any) (*discovery.DiscoveryResponse, error) {
	codec := poolCodec{pool: mem.DefaultBufferPool()}
	data, err := codec.Marshal(m)
	if err != nil {
		return nil, err
	}
	defer data.Free()
	out := &discovery.DiscoveryResponse{}
	if err := proto.Unmarshal(data.Materialize(), out); err != nil {
		return nil, err
	}
	return out, nil
}

func (f *fakeSotW) Recv() (*discovery.DiscoveryRequest, error) {
	if f.recvErr != nil {
		return nil, f.recvErr
	}
	return nil, io.EOF
}

func (f *fakeSotW) take() []*discovery.DiscoveryResponse {
	out := f.sent
	f.sent = nil
	return out
}

// fakeDelta is the same for an incremental stream.
type fakeDelta struct {
	sent    []*discovery.DeltaDiscoveryResponse
	sendErr error
}

func (f *fakeDelta) Send(r *discovery.DeltaDiscoveryResponse) error {
	if f.sendErr != nil {
		return f.sendErr
	}
	f.sent = append(f.sent, r)
	return nil
}

func (f *fakeDelta) Recv() (*discovery.DeltaDiscoveryRequest, error) { return nil, io.EOF }

func (f *fakeDelta) take() []*discovery.DeltaDiscoveryResponse {
	out := f.sent
	f.sent = nil
	return out
}

var (
	_ sotwStream  = (*fakeSotW)(nil)
	_ deltaStream = (*fakeDelta)(nil)
)

// doneRecorder is a pushReporter that keeps every report.
type doneRecorder struct {
	mu    sync.Mutex
	dones []*pb.PushDone
}

func (d *doneRecorder) done(o orderRef, res pb.PushDone_Result, synced uint64, errText string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.dones = append(d.dones, &pb.PushDone{ConnId: o.order.GetConnId(), PushId: o.order.GetPushId(), Result: res, SyncedSeq: synced, Error: errText})
}

func (d *doneRecorder) take() []*pb.PushDone {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := d.dones
	d.dones = nil
	return out
}

var _ pushReporter = (*doneRecorder)(nil)

// offlineServer is a Server with a model and no NATS or gRPC, for driving
// connections directly: the model is the store it returns, push orders are
// handed to conn.deliver, and their reports go to the recorder.
func offlineServer(t testing.TB) (*Server, *model.Store, *doneRecorder, *prometheus.Registry) {
	t.Helper()
	store := model.NewStore()
	reg := prometheus.NewRegistry()
	dones := &doneRecorder{}
	s := &Server{
		id:      "fe",
		store:   store,
		meshes:  store,
		log:     slog.New(slog.DiscardHandler),
		metrics: newMetrics(reg),
		reports: dones,
		drainCh: make(chan struct{}),
		conns:   make(map[string]*conn),
		registry: &registry{
			fe:     &pb.FrontendInfo{Id: "fe"},
			notify: make(chan struct{}, 1),
			dirty:  make(map[string]*pb.ConnectionInfo),
		},
	}
	return s, store, dones, reg
}

// takeRegistry returns the registry entries written since the last call
// (nil: the key is deleted), by connection id.
func takeRegistry(s *Server) map[string]*pb.ConnectionInfo {
	r := s.registry
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.dirty
	r.dirty = make(map[string]*pb.ConnectionInfo)
	return out
}
