package publish_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

// BenchmarkSync10k publishes a changed desired set of 10,000 objects of
// about 1 KiB per iteration (every object changes, so every iteration stores
// 10,000 records) and reports records/s.
func BenchmarkSync10k(b *testing.B) {
	const n = 10000
	e := newEnv(b)
	p := e.start(b)
	pad := strings.Repeat("x", 900)
	desired := func(gen int) []publish.Object {
		out := make([]publish.Object, n)
		for i := range out {
			out[i] = obj("Service", "ns-"+strconv.Itoa(i%50), fmt.Sprintf("svc-%05d", i), pad+strconv.Itoa(gen))
		}
		return out
	}
	sets := [2][]publish.Object{desired(0), desired(1)}
	ctx := testCtx(b)
	b.ReportAllocs()
	var records int
	var elapsed time.Duration
	gen := 0
	for b.Loop() {
		start := time.Now()
		res, err := p.Sync(ctx, sets[gen%2])
		elapsed += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if res.Published != n {
			b.Fatalf("published %d, want %d", res.Published, n)
		}
		records += res.Published
		gen++
	}
	b.ReportMetric(float64(records)/elapsed.Seconds(), "records/s")
}
