package publish_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/internal/testkit/natstest"
	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	"github.com/pilotwire/pilotwire/services/ingest/internal/ingesttest"
	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

// TestStartAfterALostPull: a writer taking over a cluster id reads the
// stream's current objects before it publishes anything, with an ordered
// consumer. A pull request the server never gets left that read waiting
// until nats.go noticed two missed idle heartbeats: with its defaults
// (30 s pulls, 15 s heartbeats) 30 s in which the new writer published
// nothing. The test loses the first pull for real (natstest.PullRefuser)
// and gives the read 10 s, a third of nats.go's 30; before the fix it
// waited them out and failed.
func TestStartAfterALostPull(t *testing.T) {
	srv := natstest.StartPullRefuser(t)
	_, admin := srv.Admin(t)
	first := &env{js: admin, reg: prometheus.NewRegistry(), log: &ingesttest.LogBuffer{}}
	p := first.start(t)
	var objs []publish.Object
	for i := range 20 {
		objs = append(objs, obj("ConfigMap", "ns", "cm-"+string(rune('a'+i)), "v"))
	}
	if _, err := p.Sync(testCtx(t), objs); err != nil {
		t.Fatal(err)
	}

	_, js := srv.Service(t)
	next, err := publish.New(js, publish.Options{Cluster: cluster, Names: names, IgnoreSnapshots: true})
	if err != nil {
		t.Fatal(err)
	}
	srv.Refuse(t, true)
	started := make(chan error, 1)
	go func() { started <- next.Start(testCtx(t)) }()
	testutil.Eventually(t, "a pull request of the read refused", func() bool { return srv.Refused() > 0 })
	srv.Refuse(t, false)

	select {
	case err := <-started:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the writer had not read the stream 10 s after its pull request was lost")
	}
	if live := len(next.Live()); live != 20 {
		t.Fatalf("the new writer read %d live objects, want 20", live)
	}
}
