// Package startupstream builds, once, the change stream the start-up
// benchmarks read: 1,000,000 records of which 20,000 are live objects,
// plus a snapshot of it, in a JetStream store directory cached under the
// repository's .cache/ (git-ignored). Building it takes a minute or more;
// later runs reuse it.
package startupstream

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/natsembed"
	"github.com/pilotwire/pilotwire/pkg/snapshot"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// The stream's shape: Live Services, each with Updates records (an add
// and its updates), and Churn Services added and deleted again.
const (
	Live    = 20_000
	Updates = 40
	Churn   = 100_000
	Total   = Live*Updates + 2*Churn // 1,000,000
	// Cluster is the cluster id of every record.
	Cluster = "c1"
)

// Names are the stream names of the cached store.
var Names = bus.Names{Prefix: "pw"}

// Dir returns the JetStream store directory holding the stream and its
// snapshot, building it if no complete one is cached.
func Dir(tb testing.TB) string {
	tb.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	dir := filepath.Join(root, ".cache", "bench", fmt.Sprintf("startup-%d-%d", Total, Live))
	done := filepath.Join(dir, "complete")
	if _, err := os.Stat(done); err == nil {
		return filepath.Join(dir, "jetstream")
	}
	if err := os.RemoveAll(dir); err != nil {
		tb.Fatal(err)
	}
	began := time.Now()
	build(tb, filepath.Join(dir, "jetstream"))
	if err := os.WriteFile(done, []byte(time.Now().UTC().Format(time.RFC3339)+"\n"), 0o644); err != nil {
		tb.Fatal(err)
	}
	tb.Logf("built the start-up stream (%d records, %d live) in %s under %s", Total, Live, time.Since(began).Round(time.Second), dir)
	return filepath.Join(dir, "jetstream")
}

func build(tb testing.TB, store string) {
	srv, err := natsembed.Start(natsembed.Options{Addr: "127.0.0.1:0", StoreDir: store})
	if err != nil {
		tb.Fatal(err)
	}
	defer srv.Shutdown()
	_, js := natstest.Connect(tb, srv.URL())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	if _, err := bus.EnsureStream(ctx, js, Names.ChangesConfig(bus.StreamOptions{})); err != nil {
		tb.Fatal(err)
	}
	n := 0
	put := func(name string, op pb.Op, rv int) {
		ns := fmt.Sprintf("ns-%d", len(name)%200)
		ref := &pb.ObjectRef{Version: "v1", Kind: "Service", Namespace: ns, Name: name}
		obj := fmt.Sprintf(`{"apiVersion":"v1","kind":"Service","metadata":{"name":%q,"namespace":%q,"resourceVersion":"%d"},"spec":{"clusterIP":"10.96.%d.%d","ports":[{"name":"http","port":80,"targetPort":%d}]}}`,
			name, ns, rv, (rv/250)%250, rv%250, 8000+rv%1000)
		data, err := proto.Marshal(&pb.ChangeRecord{Cluster: Cluster, Ref: ref, Op: op, Uid: name, ResourceVersion: fmt.Sprint(rv), Object: []byte(obj)})
		if err != nil {
			tb.Fatal(err)
		}
		if _, err := js.PublishAsync(Names.ChangeSubject(Cluster, ref), data); err != nil {
			tb.Fatal(err)
		}
		if n++; n%2000 == 0 {
			select {
			case <-js.PublishAsyncComplete():
			case <-ctx.Done():
				tb.Fatal("publishes not acknowledged")
			}
		}
	}
	for r := range Updates {
		for i := range Live {
			op := pb.Op_OP_UPDATE
			if r == 0 {
				op = pb.Op_OP_ADD
			}
			put(fmt.Sprintf("svc-%d", i), op, r*Live+i)
		}
		for j := r * Churn / Updates; j < (r+1)*Churn/Updates; j++ {
			put(fmt.Sprintf("tmp-%d", j), pb.Op_OP_ADD, j)
			put(fmt.Sprintf("tmp-%d", j), pb.Op_OP_DELETE, j)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		tb.Fatal("publishes not acknowledged")
	}
	snap := snapshot.New(snapshot.Options{JS: js, Names: Names})
	defer snap.Close()
	in, err := snap.Step(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	if in.Objects != Live {
		tb.Fatalf("snapshot holds %d objects, want %d", in.Objects, Live)
	}
}

// CPUTime is the CPU time (user and system) this process has used so far:
// the start-up benchmarks report it per start next to the wall time,
// because on a machine shared with other work the wall time measures the
// neighbours as much as the start. The embedded NATS server runs in the
// same process, so its share is counted too.
func CPUTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
