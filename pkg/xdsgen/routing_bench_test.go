package xdsgen

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/pilotwire/pilotwire/pkg/model"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// objRecord is an ADD of an object given as a JSON-shaped map.
func objRecord(b testing.TB, group, kind, ns, name string, obj map[string]any) *pb.ChangeRecord {
	meta := map[string]any{"name": name, "namespace": ns}
	if m, ok := obj["metadata"].(map[string]any); ok {
		for k, v := range m {
			meta[k] = v
		}
	}
	obj["metadata"] = meta
	raw, err := json.Marshal(obj)
	if err != nil {
		b.Fatal(err)
	}
	return &pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_ADD, Object: raw,
		Ref: &pb.ObjectRef{Group: group, Version: "v1", Kind: kind, Namespace: ns, Name: name}}
}

// routingMesh is 1,000 services in 10 namespaces, each with an HTTP port,
// two Pods (version v1 and v2) behind one EndpointSlice and a
// DestinationRule with subsets v1 and v2; with vs, the first 500 services
// also have a VirtualService (x-user: tester to v2, everyone else 90/10).
// proxies are the v1 Pods' sidecars, each in its service's namespace.
func routingMesh(b testing.TB, vs bool) (recs []*pb.ChangeRecord, proxies []Proxy) {
	for i := range 1000 {
		ns, name := fmt.Sprintf("ns-%d", i%10), fmt.Sprintf("svc-%04d", i)
		recs = append(recs, objRecord(b, "", model.KindService, ns, name, map[string]any{
			"spec": map[string]any{"clusterIP": fmt.Sprintf("10.96.%d.%d", i/250, i%250), "ports": []any{map[string]any{"name": "http", "port": 80}}},
		}))
		var eps []any
		for v := 1; v <= 2; v++ {
			pod, ip := fmt.Sprintf("%s-v%d", name, v), fmt.Sprintf("10.%d.%d.%d", i/250, i%250, v)
			recs = append(recs, objRecord(b, "", model.KindPod, ns, pod, map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": name, "version": fmt.Sprintf("v%d", v)}},
				"status":   map[string]any{"podIP": ip},
			}))
			eps = append(eps, map[string]any{"addresses": []any{ip}, "targetRef": map[string]any{"kind": "Pod", "namespace": ns, "name": pod}})
			if v == 1 {
				proxies = append(proxies, Proxy{Generator: Envoy, IP: ip, Namespace: ns})
			}
		}
		recs = append(recs, objRecord(b, model.GroupDiscovery, model.KindEndpointSlice, ns, name, map[string]any{
			"metadata":    map[string]any{"labels": map[string]any{"kubernetes.io/service-name": name}},
			"addressType": "IPv4", "ports": []any{map[string]any{"name": "http", "port": 8080}}, "endpoints": eps,
		}))
		recs = append(recs, benchRule(b, ns, name, 1))
		if vs && i < 500 {
			recs = append(recs, objRecord(b, model.GroupNetworking, model.KindVirtualService, ns, name, map[string]any{"spec": map[string]any{
				"hosts": []any{name},
				"http": []any{
					map[string]any{"match": []any{map[string]any{"headers": map[string]any{"x-user": map[string]any{"exact": "tester"}}}},
						"route": []any{map[string]any{"destination": map[string]any{"host": name, "subset": "v2"}}}},
					map[string]any{"route": []any{
						map[string]any{"destination": map[string]any{"host": name, "subset": "v1"}, "weight": 90},
						map[string]any{"destination": map[string]any{"host": name, "subset": "v2"}, "weight": 10},
					}, "retries": map[string]any{"attempts": 2}, "timeout": "5s"},
				},
			}}))
		}
	}
	return recs, proxies
}

// benchRule is the DestinationRule of a service; gen varies its
// connection pool so that two generations differ.
func benchRule(b testing.TB, ns, name string, gen int) *pb.ChangeRecord {
	return objRecord(b, model.GroupNetworking, model.KindDestinationRule, ns, name, map[string]any{"spec": map[string]any{
		"host":          name,
		"trafficPolicy": map[string]any{"connectionPool": map[string]any{"tcp": map[string]any{"maxConnections": 100 + gen}}},
		"subsets": []any{
			map[string]any{"name": "v1", "labels": map[string]any{"version": "v1"}},
			map[string]any{"name": "v2", "labels": map[string]any{"version": "v2"}},
		},
	}})
}

// generateProxies generates clusters, listeners, routes and load
// assignments for every proxy.
func generateProxies(b *testing.B, m *model.Mesh, proxies []Proxy) {
	for _, p := range proxies {
		for _, typeURL := range []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType} {
			if _, err := GenerateFor(m, p, typeURL); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkRoutingProxies generates the config of 1,000 sidecars of a
// 1,000-service mesh with DestinationRules, without VirtualServices
// (no-vs) and with 500 (500-vs):
//   - cold: a new store's first mesh;
//   - rule-changed: after one DestinationRule changed (the steady state
//     of config churn: per-service output of unchanged services is kept).
func BenchmarkRoutingProxies(b *testing.B) {
	for _, vs := range []bool{false, true} {
		name := "no-vs"
		if vs {
			name = "500-vs"
		}
		recs, proxies := routingMesh(b, vs)
		b.Run(name+"/cold", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				m := storeWith(b, recs).Snapshot()
				b.StartTimer()
				generateProxies(b, m, proxies)
			}
		})
		b.Run(name+"/rule-changed", func(b *testing.B) {
			s := storeWith(b, recs)
			generateProxies(b, s.Snapshot(), proxies)
			b.ReportAllocs()
			gen := 1
			for b.Loop() {
				b.StopTimer()
				gen++
				if err := s.Apply(benchRule(b, "ns-7", "svc-0007", gen), s.AppliedSeq()+1); err != nil {
					b.Fatal(err)
				}
				m := s.Snapshot()
				b.StartTimer()
				generateProxies(b, m, proxies)
			}
		})
	}
}

// BenchmarkRoutingRebuild is the model's side of a VirtualService change in
// the 500-VirtualService mesh of BenchmarkRoutingProxies: apply the change
// and build the snapshot (every VirtualService is resolved, merged and
// checked again), without generating.
func BenchmarkRoutingRebuild(b *testing.B) {
	recs, _ := routingMesh(b, true)
	s := storeWith(b, recs)
	s.Snapshot()
	vs := func(w int) *pb.ChangeRecord {
		return objRecord(b, model.GroupNetworking, model.KindVirtualService, "ns-7", "svc-0007", map[string]any{"spec": map[string]any{
			"hosts": []any{"svc-0007"},
			"http": []any{map[string]any{"route": []any{
				map[string]any{"destination": map[string]any{"host": "svc-0007", "subset": "v1"}, "weight": w},
				map[string]any{"destination": map[string]any{"host": "svc-0007", "subset": "v2"}, "weight": 100 - w},
			}}},
		}})
	}
	recsByGen := [2]*pb.ChangeRecord{vs(90), vs(80)}
	b.ReportAllocs()
	for b.Loop() {
		seq := s.AppliedSeq() + 1
		if err := s.Apply(recsByGen[seq%2], seq); err != nil {
			b.Fatal(err)
		}
		if m := s.Snapshot(); m.Seq != seq {
			b.Fatalf("snapshot at %d, want %d", m.Seq, seq)
		}
	}
}
