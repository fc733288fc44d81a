package model

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSnapshotCaching(t *testing.T) {
	s := NewStore()
	applyAll(t, s,
		add("c1", service("shop", "web", "10.0.0.1", svcPort{name: "http", port: 80})),
		add("c1", service("shop", "api", "10.0.0.2", svcPort{name: "http", port: 80})),
		add("c1", slice("shop", "web-1", "web", []slicePort{named("http", 8080)}, ep{addr: "10.1.0.1"})),
	)
	m1 := s.Snapshot()
	if m2 := s.Snapshot(); m2 != m1 {
		t.Fatal("Snapshot without Apply returned a new Mesh")
	}
	web1, api1 := m1.ServiceFor("shop", "web"), m1.ServiceFor("shop", "api")
	memoBuilds := 0
	build := func() any { memoBuilds++; return "value" }
	m1.Memo("k", build)
	web1.Memo("k", build)
	api1.Memo("k", build)

	// A kind the mesh ignores: new sequence, same content and memo.
	applyAll(t, s, add("c1", &unstructuredObj{kind: "ConfigMap", namespace: "shop", name: "cfg", body: map[string]any{}}))
	m2 := s.Snapshot()
	if m2 == m1 || m2.Seq != 4 || m1.Seq != 3 {
		t.Fatalf("after ConfigMap: mesh %p seq %d (old %p seq %d), want a new mesh at 4", m2, m2.Seq, m1, m1.Seq)
	}
	m2.Memo("k", build)
	if memoBuilds != 3 {
		t.Errorf("memo rebuilt after a no-op change (%d builds)", memoBuilds)
	}

	// An update that changes nothing the mesh uses keeps the service.
	sl := slice("shop", "web-1", "web", []slicePort{named("http", 8080)}, ep{addr: "10.1.0.1"})
	sl.ResourceVersion = "2"
	sl.Annotations = map[string]string{"noise": "yes"}
	applyAll(t, s, upd("c1", sl))
	if got := s.Snapshot().ServiceFor("shop", "web"); got != web1 {
		t.Error("a slice update without effect replaced the service")
	}

	// A real endpoint change replaces only that service.
	applyAll(t, s, upd("c1", slice("shop", "web-1", "web", []slicePort{named("http", 8080)}, ep{addr: "10.1.0.1"}, ep{addr: "10.1.0.2"})))
	m3 := s.Snapshot()
	web3, api3 := m3.ServiceFor("shop", "web"), m3.ServiceFor("shop", "api")
	if web3 == web1 {
		t.Error("changed service kept its old pointer")
	}
	if api3 != api1 {
		t.Error("untouched service got a new pointer")
	}
	web3.Memo("k", build)
	api3.Memo("k", build)
	if memoBuilds != 4 {
		t.Errorf("memo builds = %d, want 4 (new service only)", memoBuilds)
	}
	m3.Memo("k", build)
	if memoBuilds != 5 {
		t.Errorf("memo builds = %d, want 5 (new mesh content)", memoBuilds)
	}

	// Old snapshots are immutable.
	if got := len(m1.ServiceFor("shop", "web").Ports[0].Endpoints); got != 1 {
		t.Errorf("old snapshot changed: %d endpoints, want 1", got)
	}
	if got := len(web3.Ports[0].Endpoints); got != 2 {
		t.Errorf("new snapshot: %d endpoints, want 2", got)
	}
	if len(m1.Services) != 2 || m1.Services[0] != api1 || m1.Services[1] != web1 {
		t.Error("old snapshot's service list changed")
	}
}

func TestMeshLookups(t *testing.T) {
	s := NewStore()
	applyAll(t, s,
		add("c1", service("shop", "web", "10.0.0.1", svcPort{name: "http", port: 80}, svcPort{name: "dns", port: 53, proto: udp})),
	)
	m := s.Snapshot()
	web := m.Service("web.shop.svc.cluster.local")
	if web == nil || m.ServiceFor("shop", "web") != web {
		t.Fatal("service not found by hostname")
	}
	tests := []struct {
		name     string
		cluster  string
		wantPort int32 // 0: not found
	}{
		{name: "outbound cluster", cluster: "outbound|80||web.shop.svc.cluster.local", wantPort: 80},
		{name: "udp port resolves", cluster: "outbound|53||web.shop.svc.cluster.local", wantPort: 53},
		{name: "unknown port", cluster: "outbound|81||web.shop.svc.cluster.local"},
		{name: "unknown host", cluster: "outbound|80||api.shop.svc.cluster.local"},
		{name: "subset", cluster: "outbound|80|v1|web.shop.svc.cluster.local"},
		{name: "inbound", cluster: "inbound|80||web.shop.svc.cluster.local"},
		{name: "garbage", cluster: "outbound|x||web.shop.svc.cluster.local"},
		{name: "empty", cluster: ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc, p, ok := m.ClusterPort(tc.cluster)
			if got := ok && svc == web; got != (tc.wantPort != 0) {
				t.Fatalf("ClusterPort(%q) ok = %v", tc.cluster, ok)
			}
			if ok && p.Port != tc.wantPort {
				t.Errorf("port = %d, want %d", p.Port, tc.wantPort)
			}
		})
	}
}

func TestOutboundClusterName(t *testing.T) {
	tests := []struct {
		name                     string
		port                     int32
		subset, host, wantString string
	}{
		{name: "no subset", port: 80, host: "web.shop.svc.cluster.local", wantString: "outbound|80||web.shop.svc.cluster.local"},
		{name: "subset", port: 9090, subset: "v1", host: "a.b.svc.cluster.local", wantString: "outbound|9090|v1|a.b.svc.cluster.local"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := OutboundClusterName(tc.port, tc.subset, tc.host)
			if got != tc.wantString {
				t.Errorf("OutboundClusterName = %q, want %q", got, tc.wantString)
			}
			port, subset, host, ok := ParseOutboundClusterName(got)
			if diff := cmp.Diff([]any{tc.port, tc.subset, tc.host, true}, []any{port, subset, host, ok}); diff != "" {
				t.Errorf("round trip (-want +got):\n%s", diff)
			}
		})
	}
	for _, bad := range []string{"outbound|0||h", "outbound|65536||h", "outbound|80|", "outbound|80||", "outbound|80||a|b", "x|80||h"} {
		if _, _, _, ok := ParseOutboundClusterName(bad); ok {
			t.Errorf("ParseOutboundClusterName(%q) ok, want not", bad)
		}
	}
}

func TestNewMesh(t *testing.T) {
	a := &Service{Name: "a", Namespace: "ns", Hostname: Hostname("ns", "a")}
	b := &Service{Name: "b", Namespace: "ns", Hostname: Hostname("ns", "b")}
	m, err := NewMesh(9, []*Service{b, a})
	if err != nil {
		t.Fatal(err)
	}
	if m.Seq != 9 || len(m.Services) != 2 || m.Services[0] != a || m.Service(b.Hostname) != b {
		t.Errorf("NewMesh = %+v, want a, b at seq 9", m)
	}
	if _, err := NewMesh(1, []*Service{a, {Name: "a", Namespace: "ns", Hostname: a.Hostname}}); err == nil {
		t.Error("NewMesh accepted a duplicate hostname")
	}
	if _, err := NewMesh(1, []*Service{{Name: "x"}}); err == nil {
		t.Error("NewMesh accepted a service without hostname")
	}
}

// TestSnapshotConcurrentReaders runs readers against a writer; -race checks
// that readers use meshes without locks safely, and every snapshot a reader
// sees must be internally consistent.
func TestSnapshotConcurrentReaders(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s := NewStore()
	applyAll(t, s, add("c1", service("shop", "web", "10.0.0.1", svcPort{name: "http", port: 80})))

	var wg sync.WaitGroup
	var stop atomic.Bool
	var bad atomic.Value
	for range 4 {
		wg.Go(func() {
			var last uint64
			for !stop.Load() && ctx.Err() == nil {
				m := s.Snapshot()
				if m.Seq < last {
					bad.Store("snapshot sequence went backwards")
				}
				last = m.Seq
				for _, svc := range m.Services {
					for _, p := range svc.Ports {
						// Every endpoint list is sorted; a torn write would break that.
						for i := 1; i < len(p.Endpoints); i++ {
							if compareEndpoints(p.Endpoints[i-1], p.Endpoints[i]) >= 0 {
								bad.Store("unsorted endpoints")
							}
						}
					}
					svc.Memo("k", func() any { return len(svc.Ports) })
				}
			}
		})
	}
	for i := range 300 {
		eps := []ep{{addr: "10.1.0.1"}}
		if i%2 == 0 {
			eps = append(eps, ep{addr: "10.1.0.2"}, ep{addr: "10.1.0.3"})
		}
		applyAll(t, s, upd("c1", slice("shop", "web-1", "web", []slicePort{named("http", 8080)}, eps...)))
		if i%3 == 0 {
			s.Snapshot() // the writer may snapshot too
		}
	}
	stop.Store(true)
	wg.Wait()
	if v := bad.Load(); v != nil {
		t.Fatal(v)
	}
	if got := s.Snapshot().Seq; got != 301 {
		t.Errorf("final Seq = %d, want 301", got)
	}
}

func TestMemoBuildsOncePerKey(t *testing.T) {
	var m memo
	var calls atomic.Int32
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Go(func() {
			got := m.get(i%2, func() any { calls.Add(1); return i % 2 })
			if got != i%2 {
				t.Errorf("get(%d) = %v", i%2, got)
			}
		})
	}
	wg.Wait()
	if calls.Load() != 2 {
		t.Errorf("build called %d times, want 2", calls.Load())
	}
}

func TestConfigMemoSurvivesEndpointChanges(t *testing.T) {
	web := func(port int32) rec {
		return upd("c1", service("shop", "web", "10.0.0.1", svcPort{name: "http", port: port}))
	}
	webSlice := func(addrs ...string) rec {
		var eps []ep
		for _, a := range addrs {
			eps = append(eps, ep{addr: a})
		}
		return upd("c1", slice("shop", "web-1", "web", []slicePort{named("http", 8080)}, eps...))
	}
	api := upd("c1", service("shop", "api", "10.0.0.2", svcPort{name: "http", port: 80}))

	tests := []struct {
		name string
		next []rec
		// whether the mesh-wide and the web service's config memo carry over
		wantMeshShared, wantWebShared bool
	}{
		{name: "endpoint added", next: []rec{webSlice("10.1.0.1", "10.1.0.2")}, wantMeshShared: true, wantWebShared: true},
		{name: "all endpoints removed", next: []rec{webSlice()}, wantMeshShared: true, wantWebShared: true},
		{name: "port changed", next: []rec{web(81)}},
		{name: "service added", next: []rec{add("c1", service("shop", "new", "10.0.0.3"))}, wantWebShared: true},
		{name: "other service's endpoints changed", next: []rec{
			add("c1", slice("shop", "api-1", "api", []slicePort{named("http", 8080)}, ep{addr: "10.2.0.1"})),
		}, wantMeshShared: true, wantWebShared: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore()
			applyAll(t, s, web(80), api, webSlice("10.1.0.1"))
			m1 := s.Snapshot()
			builds := 0
			build := func() any { builds++; return builds }
			m1.ConfigMemo("k", build)
			m1.ServiceFor("shop", "web").ConfigMemo("k", build)

			applyAll(t, s, tc.next...)
			m2 := s.Snapshot()
			before := builds
			m2.ConfigMemo("k", build)
			if got := builds == before; got != tc.wantMeshShared {
				t.Errorf("mesh config memo shared = %v, want %v", got, tc.wantMeshShared)
			}
			before = builds
			m2.ServiceFor("shop", "web").ConfigMemo("k", build)
			if got := builds == before; got != tc.wantWebShared {
				t.Errorf("service config memo shared = %v, want %v", got, tc.wantWebShared)
			}
		})
	}
}
