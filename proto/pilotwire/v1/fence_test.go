package pilotwirev1_test

import (
	"testing"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

func TestOrderFence(t *testing.T) {
	var f pb.OrderFence
	steps := []struct {
		name  string
		shard string
		rev   uint64
		want  bool
	}{
		{name: "first holder", shard: "0", rev: 5, want: true},
		{name: "same holder again", shard: "0", rev: 5, want: true},
		{name: "successor", shard: "0", rev: 9, want: true},
		{name: "late ex-holder dropped", shard: "0", rev: 5, want: false},
		{name: "other shard is its own", shard: "1", rev: 2, want: true},
		{name: "unfenced sender admitted", shard: "0", rev: 0, want: true},
		{name: "successor still admitted", shard: "0", rev: 9, want: true},
	}
	for _, s := range steps {
		if got := f.Admit(&pb.PushOrderBatch{Shard: s.shard, LeaseRevision: s.rev}); got != s.want {
			t.Errorf("%s: Admit(shard %s, rev %d) = %v, want %v", s.name, s.shard, s.rev, got, s.want)
		}
	}
}
