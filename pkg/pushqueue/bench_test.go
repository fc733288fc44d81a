package pushqueue

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
)

type benchReq struct {
	full       bool
	throughSeq uint64
}

func mergeBench(into, from benchReq) benchReq {
	return benchReq{full: into.full || from.full, throughSeq: max(into.throughSeq, from.throughSeq)}
}

func benchConns(n int) []string {
	conns := make([]string, n)
	for i := range conns {
		conns[i] = fmt.Sprintf("sidecar~10.0.0.%d~pod-%d.ns~ns.svc.cluster.local-%d", i%256, i, i)
	}
	return conns
}

// BenchmarkEnqueueDequeueMarkDone is one push cycle for one connection, in
// a queue of 1,000 connections, on one goroutine.
func BenchmarkEnqueueDequeueMarkDone(b *testing.B) {
	conns := benchConns(1000)
	q := New(Config{MaxInFlight: DefaultThrottle()}, mergeBench)
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		q.Enqueue(conns[i%len(conns)], benchReq{throughSeq: uint64(i)})
		conn, _, err := q.Dequeue(ctx)
		if err != nil {
			b.Fatal(err)
		}
		q.MarkDone(conn)
		i++
	}
}

// BenchmarkEnqueueFanOut is one PushRequest fanned out to 1,000 and 10,000
// connections, then all of them dequeued and marked done.
func BenchmarkEnqueueFanOut(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(strconv.Itoa(n), func(b *testing.B) { benchFanOut(b, n) })
	}
}

func benchFanOut(b *testing.B, n int) {
	conns := benchConns(n)
	q := New(Config{}, mergeBench)
	ctx := context.Background()
	b.ReportAllocs()
	seq := uint64(0)
	for b.Loop() {
		seq++
		for _, c := range conns {
			q.Enqueue(c, benchReq{full: true, throughSeq: seq})
		}
		for range conns {
			conn, _, err := q.Dequeue(ctx)
			if err != nil {
				b.Fatal(err)
			}
			q.MarkDone(conn)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(conns)), "ns/conn")
	b.ReportMetric(float64(b.N*len(conns))/b.Elapsed().Seconds(), "conns/s")
}

// BenchmarkEnqueueMerge is an Enqueue for a connection already pending.
func BenchmarkEnqueueMerge(b *testing.B) {
	q := New(Config{}, mergeBench)
	q.Enqueue("a", benchReq{})
	b.ReportAllocs()
	i := uint64(0)
	for b.Loop() {
		i++
		q.Enqueue("a", benchReq{throughSeq: i})
	}
}

// BenchmarkParallel has producers and throttled consumers contending: the
// cost of one request handed from a producer to a consumer.
func BenchmarkParallel(b *testing.B) {
	conns := benchConns(1000)
	q := New(Config{MaxInFlight: DefaultThrottle()}, mergeBench)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				conn, _, err := q.Dequeue(ctx)
				if err != nil {
					return
				}
				q.MarkDone(conn)
			}
		})
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			q.Enqueue(conns[i%len(conns)], benchReq{throughSeq: uint64(i)})
			i++
		}
	})
	cancel()
	wg.Wait()
}
