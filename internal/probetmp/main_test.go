package probe

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestProbe(t *testing.T) {
	nc, err := nats.Connect("nats://127.0.0.1:27948")
	if err != nil { t.Fatal(err) }
	js, _ := jetstream.New(nc)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for n := range js.StreamNames(ctx).Name() {
		s, _ := js.Stream(ctx, n)
		i, _ := s.Info(ctx)
		t.Logf("%s replicas=%d msgs=%d leader=%s", n, i.Config.Replicas, i.State.Msgs, i.Cluster.Leader)
	}
	kv, err := js.KeyValue(ctx, "PW_REGISTRY")
	if err != nil { t.Fatal(err) }
	keys, err := kv.ListKeys(ctx)
	if err != nil { t.Fatal(err) }
	per := map[string]int{}
	for k := range keys.Keys() {
		p := strings.Split(k, ".")
		if len(p) > 1 { per[p[0]+"."+p[1]]++ } else { per[k]++ }
	}
	t.Log(per)
}
