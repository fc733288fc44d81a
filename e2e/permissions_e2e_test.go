package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/internal/testkit/adstest"
	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/pipelinetest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/pkg/bus"
	"github.com/pilotwire/pilotwire/pkg/snapshot"
	"github.com/pilotwire/pilotwire/pkg/svc"
	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

// TestLeastPrivilege runs the four services on a nats-server configured
// with deploy/nats/accounts.conf, each as its own user: the pipeline works
// end to end (changes reach the frontend's model, PushRequests the pusher),
// and each is denied subjects it does not own: ingest a frontend's orders,
// a frontend another's orders and the pusher's inbox, and every user but
// the owner a service's durable consumer (its deletion, redefinition,
// pulls and acks).
func TestLeastPrivilege(t *testing.T) {
	for _, u := range []string{"INGEST", "DEBOUNCER", "PUSHER", "ADS_0", "ADS_1", "ADS_2", "CLI", "ADMIN"} {
		t.Setenv("PILOTWIRE_"+u+"_PASSWORD", "pw-"+strings.ToLower(u))
	}
	fo, err := server.ProcessConfigFile("../deploy/nats/accounts.conf")
	if err != nil {
		t.Fatal(err)
	}
	url := natstest.StartWith(t, func(o *server.Options) { o.Accounts, o.Users = fo.Accounts, fo.Users })
	users := map[string]svc.NATSAuth{
		"ingest":    {User: "ingest", Password: "pw-ingest"},
		"debouncer": {User: "debouncer", Password: "pw-debouncer"},
		"pusher":    {User: "pusher", Password: "pw-pusher"},
		"ads":       {User: "ads-0", Password: "pw-ads_0"},
	}
	dir := t.TempDir()
	pipelinetest.WriteFile(t, dir, "mesh.yaml", meshYAML)
	s := startServices(t, url, dir, svc.Common{NATSURL: url, Prefix: "pw"}, users)
	for name, h := range s.healths {
		s.waitFor(t, name+" ready", h.Ready)
	}
	s.waitFor(t, "the frontend's model applied the changes", func() bool {
		return testutil.Metric(s.regs["ads"], "pilotwire_ads_applied_seq") > 0
	})
	s.waitFor(t, "the pusher got a PushRequest", func() bool {
		return testutil.Metric(s.regs["pusher"], "pilotwire_pusher_latest_through_seq") > 0
	})
	// A proxy gets its config, registers (the pusher sees it), and a new
	// Service reaches it through debouncer, pusher and the frontend's
	// orders.
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	c := adstest.Dial(ctx, t, <-s.adsAddr, adstest.ClientNode)
	cds := c.Request(resource.ClusterType)
	if _, ok := adstest.Decode(t, cds, func() *cluster.Cluster { return &cluster.Cluster{} })["outbound|80||web.shop.svc.cluster.local"]; !ok {
		t.Fatalf("first CDS lacks the web cluster")
	}
	s.waitFor(t, "the pusher knows the connection", func() bool {
		return testutil.Metric(s.regs["pusher"], "pilotwire_pusher_connections") == 1
	})
	pipelinetest.WriteFile(t, dir, "new.yaml", `apiVersion: v1
kind: Service
metadata: {name: added, namespace: default}
spec:
  clusterIP: 10.96.0.99
  ports:
  - {name: http, port: 8000}
`)
	for {
		resp := c.RecvType(resource.ClusterType)
		c.ACK(resp)
		if _, ok := adstest.Decode(t, resp, func() *cluster.Cluster { return &cluster.Cluster{} })["outbound|8000||added.default.svc.cluster.local"]; ok {
			break
		}
	}
	for name := range s.regs {
		if n := testutil.Metric(s.regs[name], "pilotwire_stream_ensure_retries_total"); n != 0 {
			t.Errorf("%s retried its streams %v times, want none (a permission missing?)", name, n)
		}
	}

	// Ingest may not send a frontend orders; a frontend may not take
	// another's, nor read the pusher's inbox.
	publish := func(subject string) func(nc *nats.Conn) error {
		return func(nc *nats.Conn) error { return nc.Publish(subject, []byte("{}")) }
	}
	others := map[string]svc.NATSAuth{"cli": {User: "cli", Password: "pw-cli"}}
	for _, tc := range []struct {
		user string
		try  func(nc *nats.Conn) error
	}{
		{"ingest", publish("pw.fe.ads-0.orders")},
		{"ads", func(nc *nats.Conn) error { _, err := nc.SubscribeSync("pw.fe.ads-1.orders"); return err }},
		// Nor read another user's replies and consumer deliveries.
		{"ads", func(nc *nats.Conn) error { _, err := nc.SubscribeSync("_INBOX.pusher.>"); return err }},
		// Nobody but its owner may delete, redefine, pull from or ack for
		// a service's durable consumer, on a stream it may otherwise use.
		{"ads", publish("$JS.API.CONSUMER.DELETE.PW_CHANGES.debouncer")},
		{"ingest", publish("$JS.API.CONSUMER.CREATE.PW_CHANGES.debouncer.pw.changes.>")},
		{"ingest", publish("$JS.API.CONSUMER.MSG.NEXT.PW_CHANGES.debouncer")},
		{"ads", publish("$JS.ACK.PW_CHANGES.debouncer.1.1.1.1.0")},
		{"cli", publish("$JS.API.CONSUMER.DELETE.PW_PUSHES.pusher-0")},
		{"cli", publish("$JS.API.CONSUMER.DURABLE.CREATE.PW_PUSHES.pusher-0")},
		{"debouncer", publish("$JS.API.CONSUMER.MSG.NEXT.PW_PUSHES.pusher-0")},
		{"pusher", publish("$JS.API.CONSUMER.DELETE.PW_CHANGES.debouncer")},
	} {
		denied := make(chan error, 1)
		auth, ok := users[tc.user]
		if !ok {
			auth = others[tc.user]
		}
		opts, _ := auth.Options()
		nc, err := nats.Connect(url, append(opts, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case denied <- err:
			default:
			}
		}))...)
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		if err := tc.try(nc); err != nil {
			t.Fatal(err)
		}
		_ = nc.Flush()
		var got error
		s.waitFor(t, tc.user+" denied", func() bool {
			select {
			case got = <-denied:
				return true
			default:
				return false
			}
		})
		if !errors.Is(got, nats.ErrPermissionViolation) {
			t.Errorf("%s: %v, want a permissions violation", tc.user, got)
		}
	}
}

// TestIngestStartsFromSnapshotAsItsUser: with deploy/nats/accounts.conf,
// ingest may read the snapshot the debouncer's snapshotter wrote, and
// starts from it: before, its user had no access to the bucket and every
// start fell back to reading the change stream.
func TestIngestStartsFromSnapshotAsItsUser(t *testing.T) {
	for _, u := range []string{"INGEST", "DEBOUNCER", "PUSHER", "ADS_0", "ADS_1", "ADS_2", "CLI", "ADMIN"} {
		t.Setenv("PILOTWIRE_"+u+"_PASSWORD", "pw-"+strings.ToLower(u))
	}
	fo, err := server.ProcessConfigFile("../deploy/nats/accounts.conf")
	if err != nil {
		t.Fatal(err)
	}
	url := natstest.StartWith(t, func(o *server.Options) { o.Accounts, o.Users = fo.Accounts, fo.Users })
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	connect := func(user, password string) jetstream.JetStream {
		t.Helper()
		log := slog.New(slog.NewTextHandler(pipelinetest.TestWriter{T: t}, nil)).With("component", user)
		nc, js, err := svc.Connect(ctx, url, user, svc.NATSAuth{User: user, Password: password}, log, prometheus.NewCounter(prometheus.CounterOpts{Name: "c", Help: "c"}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return js
	}
	ingestJS, debouncerJS := connect("ingest", "pw-ingest"), connect("debouncer", "pw-debouncer")
	names := bus.Names{Prefix: "pw"}
	start := func(reg prometheus.Registerer, ignore bool) *publish.Publisher {
		t.Helper()
		p, err := publish.New(ingestJS, publish.Options{Cluster: "Kubernetes", Names: names, Registerer: reg, IgnoreSnapshots: ignore,
			Log: slog.New(slog.NewTextHandler(pipelinetest.TestWriter{T: t}, nil))})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return p
	}
	p := start(nil, false)
	var objs []publish.Object
	for i := range 5 {
		name := fmt.Sprintf("svc-%d", i)
		objs = append(objs, publish.Object{Key: publish.Key{Kind: "Service", Namespace: "default", Name: name}, Version: "v1",
			JSON: []byte(fmt.Sprintf(`{"apiVersion":"v1","kind":"Service","metadata":{"name":%q,"namespace":"default"}}`, name))})
	}
	if _, err := p.Sync(ctx, objs); err != nil {
		t.Fatal(err)
	}
	snap := snapshot.New(snapshot.Options{JS: debouncerJS, Names: names})
	defer snap.Close()
	in, err := snap.Step(ctx)
	if err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	got, want := start(reg, false), start(nil, true)
	if n := testutil.Metric(reg, "pilotwire_ingest_start_snapshot_seq"); n != float64(in.Seq) {
		t.Errorf("ingest started from snapshot %v, want the one at %d", n, in.Seq)
	}
	if n := testutil.Metric(reg, "pilotwire_ingest_snapshot_unusable_total"); n != 0 {
		t.Errorf("ingest found the snapshot unusable %v times, want 0", n)
	}
	if diff := cmp.Diff(want.Live(), got.Live()); diff != "" || len(got.Live()) != 5 {
		t.Errorf("live objects (-from the stream +from the snapshot):\n%s", diff)
	}
}
