package model

import (
	"errors"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var ignoreMemo = cmpopts.IgnoreUnexported(Service{})

const (
	tcp = "TCP"
	udp = "UDP"
)

func TestApplyBuildsMesh(t *testing.T) {
	web := func(ports ...svcPort) *corev1.Service { return service("shop", "web", "10.0.0.1", ports...) }
	http80 := svcPort{name: "http", port: 80, target: intstr.FromInt32(8080)}
	webHTTP := func(ep ...Endpoint) []*Service {
		return []*Service{{
			Name: "web", Namespace: "shop", Hostname: "web.shop.svc.cluster.local", ClusterIP: "10.0.0.1",
			Clusters: []string{"c1"},
			Ports:    []*Port{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080), Endpoints: ep}},
		}}
	}

	tests := []struct {
		name string
		recs []rec
		want []*Service
	}{
		{
			name: "service without slices has no endpoints",
			recs: []rec{add("c1", web(http80))},
			want: webHTTP(),
		},
		{
			name: "endpoint port matched by name, targetPort ignored",
			recs: []rec{
				add("c1", web(http80)),
				add("c1", slice("shop", "web-1", "web", []slicePort{named("metrics", 9100), named("http", 9090)},
					ep{addr: "10.1.0.1", zone: "z1", node: "n1"})),
			},
			want: webHTTP(Endpoint{Address: "10.1.0.1", Port: 9090, Zone: "z1", NodeName: "n1", ClusterID: "c1"}),
		},
		{
			name: "unnamed service port matches nil slice port name",
			recs: []rec{
				add("c1", web(svcPort{port: 80})),
				add("c1", slice("shop", "web-1", "web", []slicePort{{port: ptr[int32](8080)}}, ep{addr: "10.1.0.1"})),
			},
			want: []*Service{{
				Name: "web", Namespace: "shop", Hostname: "web.shop.svc.cluster.local", ClusterIP: "10.0.0.1", Clusters: []string{"c1"},
				Ports: []*Port{{Port: 80, Protocol: corev1.ProtocolTCP, Endpoints: []Endpoint{{Address: "10.1.0.1", Port: 8080, ClusterID: "c1"}}}},
			}},
		},
		{
			name: "slice port of another protocol or without a number is not used",
			recs: []rec{
				add("c1", web(svcPort{name: "dns", port: 53, proto: udp}, svcPort{name: "dns-tcp", port: 53, proto: tcp})),
				add("c1", slice("shop", "web-1", "web", []slicePort{{name: ptr("dns"), proto: tcp, port: ptr[int32](5353)}, {name: ptr("dns-tcp")}},
					ep{addr: "10.1.0.1"})),
			},
			want: []*Service{{
				Name: "web", Namespace: "shop", Hostname: "web.shop.svc.cluster.local", ClusterIP: "10.0.0.1", Clusters: []string{"c1"},
				Ports: []*Port{
					{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP},
					{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
				},
			}},
		},
		{
			name: "only ready endpoints serve, nil ready is ready",
			recs: []rec{
				add("c1", web(http80)),
				add("c1", slice("shop", "web-1", "web", []slicePort{named("http", 8080)},
					ep{addr: "10.1.0.1"}, ep{addr: "10.1.0.2", ready: ptr(true)}, ep{addr: "10.1.0.3", ready: ptr(false)})),
			},
			want: webHTTP(
				Endpoint{Address: "10.1.0.1", Port: 8080, ClusterID: "c1"},
				Endpoint{Address: "10.1.0.2", Port: 8080, ClusterID: "c1"},
			),
		},
		{
			name: "slices join by service-name label in the same namespace only",
			recs: []rec{
				add("c1", web(http80)),
				add("c1", slice("shop", "unlabelled", "", []slicePort{named("http", 8080)}, ep{addr: "10.9.0.1"})),
				add("c1", slice("shop", "other", "api", []slicePort{named("http", 8080)}, ep{addr: "10.9.0.2"})),
				add("c1", slice("other-ns", "web-x", "web", []slicePort{named("http", 8080)}, ep{addr: "10.9.0.3"})),
				add("c1", slice("shop", "web-abc", "web", []slicePort{named("http", 8080)}, ep{addr: "10.1.0.1"})),
			},
			want: webHTTP(Endpoint{Address: "10.1.0.1", Port: 8080, ClusterID: "c1"}),
		},
		{
			name: "relabelling a slice moves its endpoints",
			recs: []rec{
				add("c1", web(http80)),
				add("c1", slice("shop", "s", "api", []slicePort{named("http", 8080)}, ep{addr: "10.1.0.1"})),
				upd("c1", slice("shop", "s", "web", []slicePort{named("http", 8080)}, ep{addr: "10.1.0.1"})),
			},
			want: webHTTP(Endpoint{Address: "10.1.0.1", Port: 8080, ClusterID: "c1"}),
		},
		{
			name: "deleting a slice removes its endpoints",
			recs: []rec{
				add("c1", web(http80)),
				add("c1", slice("shop", "a", "web", []slicePort{named("http", 8080)}, ep{addr: "10.1.0.1"})),
				add("c1", slice("shop", "b", "web", []slicePort{named("http", 8080)}, ep{addr: "10.1.0.2"})),
				// A delete carries the last known object, but the store must not need it.
				{cluster: "c1", op: pb.Op_OP_DELETE, ref: &pb.ObjectRef{Group: GroupDiscovery, Version: "v1", Kind: KindEndpointSlice, Namespace: "shop", Name: "a"}},
			},
			want: webHTTP(Endpoint{Address: "10.1.0.2", Port: 8080, ClusterID: "c1"}),
		},
		{
			name: "update replaces the service",
			recs: []rec{
				add("c1", web(http80)),
				add("c1", slice("shop", "a", "web", []slicePort{named("http", 8080), named("grpc", 9090)}, ep{addr: "10.1.0.1"})),
				upd("c1", web(svcPort{name: "grpc", port: 90, appProto: "grpc"})),
			},
			want: []*Service{{
				Name: "web", Namespace: "shop", Hostname: "web.shop.svc.cluster.local", ClusterIP: "10.0.0.1", Clusters: []string{"c1"},
				Ports: []*Port{{Name: "grpc", Port: 90, Protocol: corev1.ProtocolTCP, AppProtocol: "grpc",
					Endpoints: []Endpoint{{Address: "10.1.0.1", Port: 9090, ClusterID: "c1"}}}},
			}},
		},
		{
			name: "deleting the service removes it, its slices wait for it",
			recs: []rec{
				add("c1", web(http80)),
				add("c1", slice("shop", "a", "web", []slicePort{named("http", 8080)}, ep{addr: "10.1.0.1"})),
				del("c1", web(http80)),
			},
			want: nil,
		},
		{
			name: "a service added after its slices gets their endpoints",
			recs: []rec{
				add("c1", slice("shop", "a", "web", []slicePort{named("http", 8080)}, ep{addr: "10.1.0.1"})),
				add("c1", web(http80)),
			},
			want: webHTTP(Endpoint{Address: "10.1.0.1", Port: 8080, ClusterID: "c1"}),
		},
		{
			name: "multi-cluster: one service, ports and IP from the first cluster id, endpoints from all",
			recs: []rec{
				add("c2", service("shop", "web", "10.2.0.1", svcPort{name: "http", port: 81})),
				add("c1", web(http80)),
				add("c2", slice("shop", "web-c2", "web", []slicePort{named("http", 8080)}, ep{addr: "10.1.0.2", zone: "z2"})),
				add("c1", slice("shop", "web-c1", "web", []slicePort{named("http", 8080)}, ep{addr: "10.1.0.1", zone: "z1"})),
				// A cluster without the Service still contributes endpoints.
				add("c3", slice("shop", "web-c3", "web", []slicePort{named("http", 8080)}, ep{addr: "10.1.0.3"})),
			},
			want: []*Service{{
				Name: "web", Namespace: "shop", Hostname: "web.shop.svc.cluster.local", ClusterIP: "10.0.0.1",
				Clusters: []string{"c1", "c2"},
				Ports: []*Port{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(8080), Endpoints: []Endpoint{
					{Address: "10.1.0.1", Port: 8080, Zone: "z1", ClusterID: "c1"},
					{Address: "10.1.0.2", Port: 8080, Zone: "z2", ClusterID: "c2"},
					{Address: "10.1.0.3", Port: 8080, ClusterID: "c3"},
				}}},
			}},
		},
		{
			name: "multi-cluster: deleting the first cluster's service promotes the next",
			recs: []rec{
				add("c2", service("shop", "web", "10.2.0.1", svcPort{name: "http", port: 81})),
				add("c1", web(http80)),
				del("c1", web(http80)),
			},
			want: []*Service{{
				Name: "web", Namespace: "shop", Hostname: "web.shop.svc.cluster.local", ClusterIP: "10.2.0.1", Clusters: []string{"c2"},
				Ports: []*Port{{Name: "http", Port: 81, Protocol: corev1.ProtocolTCP}},
			}},
		},
		{
			name: "same endpoint in two slices is listed once; FQDN slices are ignored",
			recs: []rec{
				add("c1", web(http80)),
				add("c1", slice("shop", "a", "web", []slicePort{named("http", 8080)}, ep{addr: "10.1.0.1", zone: "z1"})),
				add("c1", slice("shop", "b", "web", []slicePort{named("http", 8080)}, ep{addr: "10.1.0.1", zone: "z1"}, ep{addr: "10.1.0.10"})),
				add("c1", func() *discoveryv1.EndpointSlice {
					s := slice("shop", "fqdn", "web", []slicePort{named("http", 8080)}, ep{addr: "web.example.com"})
					s.AddressType = discoveryv1.AddressTypeFQDN
					return s
				}()),
			},
			want: webHTTP(
				Endpoint{Address: "10.1.0.1", Port: 8080, Zone: "z1", ClusterID: "c1"},
				Endpoint{Address: "10.1.0.10", Port: 8080, ClusterID: "c1"},
			),
		},
		{
			name: "headless and ExternalName services; services sorted by hostname",
			recs: []rec{
				add("c1", service("shop", "db", "None", svcPort{name: "tcp-db", port: 5432})),
				add("c1", func() *corev1.Service {
					s := service("a", "ext", "")
					s.Spec.Type = corev1.ServiceTypeExternalName
					s.Spec.ExternalName = "example.com"
					return s
				}()),
				add("c1", service("shop", "ipv6", "FD00::0001", svcPort{port: 80})),
			},
			want: []*Service{
				{Name: "db", Namespace: "shop", Hostname: "db.shop.svc.cluster.local", Headless: true, Clusters: []string{"c1"},
					Ports: []*Port{{Name: "tcp-db", Port: 5432, Protocol: corev1.ProtocolTCP}}},
				{Name: "ext", Namespace: "a", Hostname: "ext.a.svc.cluster.local", ExternalName: "example.com", Clusters: []string{"c1"}},
				{Name: "ipv6", Namespace: "shop", Hostname: "ipv6.shop.svc.cluster.local", ClusterIP: "fd00::1", Clusters: []string{"c1"},
					Ports: []*Port{{Port: 80, Protocol: corev1.ProtocolTCP}}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore()
			applyAll(t, s, tc.recs...)
			m := s.Snapshot()
			if m.Seq != uint64(len(tc.recs)) {
				t.Errorf("Seq = %d, want %d", m.Seq, len(tc.recs))
			}
			if diff := cmp.Diff(tc.want, m.Services, ignoreMemo, cmpopts.IgnoreFields(Service{}, "ExportTo", "Resolution"), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("services (-want +got):\n%s", diff)
			}
			// The incremental snapshot must equal one built from scratch.
			fresh := NewStore()
			applyAll(t, fresh, tc.recs...)
			if diff := cmp.Diff(fresh.Snapshot().Services, m.Services, ignoreMemo); diff != "" {
				t.Errorf("incremental vs fresh (-fresh +incremental):\n%s", diff)
			}
		})
	}
}

func TestApplyIncrementalMatchesFresh(t *testing.T) {
	// Snapshots taken after every record must match a store that only
	// snapshots at the end: incremental rebuilds may not drift.
	recs := []rec{
		add("c1", service("shop", "web", "10.0.0.1", svcPort{name: "http", port: 80})),
		add("c1", slice("shop", "a", "web", []slicePort{named("http", 8080)}, ep{addr: "10.1.0.1"})),
		add("c2", slice("shop", "b", "web", []slicePort{named("http", 8080)}, ep{addr: "10.1.0.2"})),
		add("c1", service("shop", "api", "10.0.0.2", svcPort{name: "grpc", port: 9000})),
		upd("c1", slice("shop", "a", "api", []slicePort{named("grpc", 9000)}, ep{addr: "10.1.0.1"})),
		del("c2", slice("shop", "b", "web", nil)),
		add("c2", service("shop", "web", "10.0.0.9", svcPort{name: "http", port: 80})),
		del("c1", service("shop", "web", "10.0.0.1")),
	}
	stepwise, final := NewStore(), NewStore()
	for _, r := range recs {
		applyAll(t, stepwise, r)
		stepwise.Snapshot()
	}
	applyAll(t, final, recs...)
	if diff := cmp.Diff(final.Snapshot().Services, stepwise.Snapshot().Services, ignoreMemo); diff != "" {
		t.Errorf("(-once +stepwise):\n%s", diff)
	}
}

func TestApplyErrors(t *testing.T) {
	good := add("c1", service("shop", "web", "10.0.0.1", svcPort{name: "http", port: 80}))
	svcRef := &pb.ObjectRef{Version: "v1", Kind: KindService, Namespace: "shop", Name: "web"}
	tests := []struct {
		name string
		bad  *pb.ChangeRecord
	}{
		{name: "truncated Service JSON", bad: &pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_UPDATE, Ref: svcRef, Object: []byte(`{"metadata":{"name":"web"`)}},
		{name: "Service JSON of the wrong shape", bad: &pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_UPDATE, Ref: svcRef, Object: []byte(`{"spec":{"ports":"nope"}}`)}},
		{name: "null object", bad: &pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_UPDATE, Ref: svcRef, Object: []byte(`null`)}},
		{name: "empty object", bad: &pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_UPDATE, Ref: svcRef}},
		{name: "bad EndpointSlice JSON", bad: &pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_ADD,
			Ref: &pb.ObjectRef{Group: GroupDiscovery, Kind: KindEndpointSlice, Namespace: "shop", Name: "s"}, Object: []byte(`{"endpoints":[{"addresses":5}]}`)}},
		{name: "bad JSON of a raw kind", bad: &pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_ADD,
			Ref: &pb.ObjectRef{Kind: "ConfigMap", Namespace: "shop", Name: "cm"}, Object: []byte(`{"data":`)}},
		{name: "no ref", bad: &pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_ADD, Object: []byte(`{}`)}},
		{name: "no name", bad: &pb.ChangeRecord{Cluster: "c1", Op: pb.Op_OP_ADD, Ref: &pb.ObjectRef{Kind: "Service"}, Object: []byte(`{}`)}},
		{name: "unspecified op", bad: &pb.ChangeRecord{Cluster: "c1", Ref: svcRef, Object: []byte(`{}`)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore()
			applyAll(t, s, good)
			before := s.Snapshot()
			err := s.Apply(tc.bad, 7)
			if err == nil {
				t.Fatal("Apply succeeded, want an error")
			}
			// Decoded ahead, the record fails the same way.
			s2 := NewStore()
			applyAll(t, s2, good)
			d := Decode(tc.bad)
			if err2 := s2.ApplyDecoded(&d, 7); err2 == nil || err2.Error() != err.Error() {
				t.Errorf("ApplyDecoded = %v, want Apply's %v", err2, err)
			}
			if diff := cmp.Diff(s.Snapshot().Services, s2.Snapshot().Services, ignoreMemo); diff != "" {
				t.Errorf("Apply and ApplyDecoded left different meshes (-Apply +ApplyDecoded):\n%s", diff)
			}
			if got := s.AppliedSeq(); got != 7 {
				t.Errorf("AppliedSeq = %d, want 7 (a rejected record still advances)", got)
			}
			after := s.Snapshot()
			if after.Seq != 7 {
				t.Errorf("Snapshot().Seq = %d, want 7", after.Seq)
			}
			if diff := cmp.Diff(before.Services, after.Services, ignoreMemo); diff != "" {
				t.Errorf("a rejected record changed the mesh (-before +after):\n%s", diff)
			}
			if s.Len() != 1 {
				t.Errorf("Len = %d, want 1", s.Len())
			}
			// The store keeps working.
			applyAll(t, s, add("c1", service("shop", "api", "10.0.0.2", svcPort{port: 80})))
			if got := len(s.Snapshot().Services); got != 2 {
				t.Errorf("after a good record: %d services, want 2", got)
			}
		})
	}
}

func TestApplyAlreadyApplied(t *testing.T) {
	s := NewStore()
	if err := s.Apply(add("c1", service("shop", "web", "10.0.0.1")).proto(t), 5); err != nil {
		t.Fatal(err)
	}
	for _, seq := range []uint64{5, 4, 0} {
		err := s.Apply(del("c1", service("shop", "web", "10.0.0.1")).proto(t), seq)
		if !errors.Is(err, ErrAlreadyApplied) {
			t.Errorf("Apply(seq %d) = %v, want ErrAlreadyApplied", seq, err)
		}
	}
	for _, seq := range []uint64{5, 4, 0} {
		d := Decode(del("c1", service("shop", "web", "10.0.0.1")).proto(t))
		if err := s.ApplyDecoded(&d, seq); !errors.Is(err, ErrAlreadyApplied) {
			t.Errorf("ApplyDecoded(seq %d) = %v, want ErrAlreadyApplied", seq, err)
		}
	}
	if s.AppliedSeq() != 5 || len(s.Snapshot().Services) != 1 {
		t.Errorf("stale records changed the store: seq %d, %d services", s.AppliedSeq(), len(s.Snapshot().Services))
	}
}

func TestStoreKeepsEveryKind(t *testing.T) {
	s := NewStore()
	cm := &unstructuredObj{kind: "ConfigMap", namespace: "shop", name: "cfg", body: map[string]any{"data": map[string]any{"k": "v"}}}
	vs := &unstructuredObj{group: "networking.istio.io", kind: "VirtualService", namespace: "shop", name: "web", body: map[string]any{"spec": map[string]any{}}}
	svc := service("shop", "web", "10.0.0.1", svcPort{port: 80})
	applyAll(t, s, add("c1", cm), add("c2", vs), add("c1", svc))

	cmKey := ObjectKey{Cluster: "c1", Kind: "ConfigMap", Namespace: "shop", Name: "cfg"}
	got := s.objects[cmKey]
	if got == nil {
		t.Fatal("ConfigMap not stored")
	}
	if got.seq != 1 || got.svc != nil || got.slice != nil {
		t.Errorf("ConfigMap stored as %+v, want seq 1 and nothing decoded", got)
	}
	if s.objects[ObjectKey{Cluster: "c1", Group: "networking.istio.io", Kind: "VirtualService", Namespace: "shop", Name: "web"}] != nil {
		t.Error("VirtualService found under the wrong cluster")
	}
	gotSvc := s.objects[ObjectKey{Cluster: "c1", Kind: KindService, Namespace: "shop", Name: "web"}]
	if gotSvc == nil || gotSvc.svc == nil {
		t.Fatalf("Service stored as %+v, want decoded", gotSvc)
	}
	if gotSvc.uid != "uid-web" || gotSvc.resourceVersion != "1" {
		t.Errorf("uid/resourceVersion = %q/%q", gotSvc.uid, gotSvc.resourceVersion)
	}
	if s.Len() != 3 {
		t.Errorf("Len = %d, want 3", s.Len())
	}
	applyAll(t, s, del("c1", cm))
	if s.objects[cmKey] != nil || s.Len() != 2 {
		t.Errorf("ConfigMap still stored after delete (Len %d)", s.Len())
	}
}

func FuzzApply(f *testing.F) {
	f.Add("", "Service", []byte(`{"spec":{"clusterIP":"10.0.0.1","ports":[{"name":"http","port":80}]}}`), int32(1))
	f.Add("discovery.k8s.io", "EndpointSlice", []byte(`{"metadata":{"labels":{"kubernetes.io/service-name":"web"}},"addressType":"IPv4","ports":[{"name":"http","port":8080}],"endpoints":[{"addresses":["10.1.0.1"]}]}`), int32(1))
	f.Add("discovery.k8s.io", "EndpointSlice", []byte(`{"metadata":{"labels":{"kubernetes.io/service-name":"web"}},"addressType":"IPv6","ports":[{"port":-1}],"endpoints":[{"addresses":["fe80::1%eth0"]}]}`), int32(3))
	f.Add("", "ConfigMap", []byte(`{"data":{}}`), int32(2))
	f.Add("", "Node", []byte(`{"metadata":{"labels":{"topology.kubernetes.io/region":"r","topology.kubernetes.io/zone":"z"}}}`), int32(1))
	f.Add("", "Pod", []byte(`{"metadata":{"labels":{"istio-locality":"r.z.s"}},"spec":{"nodeName":"n1"},"status":{"podIP":"10.1.0.1"}}`), int32(2))
	f.Fuzz(func(t *testing.T, group, kind string, obj []byte, op int32) {
		s := NewStore()
		applyAll(t, s, add("c1", service("shop", "web", "10.0.0.1", svcPort{name: "http", port: 80})))
		r := &pb.ChangeRecord{Cluster: "c1", Op: pb.Op(op), Ref: &pb.ObjectRef{Group: group, Kind: kind, Namespace: "shop", Name: "web"}, Object: obj}
		err := s.Apply(r, 2) // errors are fine; panics and a stuck sequence are not
		if s.AppliedSeq() != 2 {
			t.Fatalf("AppliedSeq = %d, want 2", s.AppliedSeq())
		}
		m := s.Snapshot()
		// Decoded ahead, the record has the same effect and error.
		s2 := NewStore()
		applyAll(t, s2, add("c1", service("shop", "web", "10.0.0.1", svcPort{name: "http", port: 80})))
		d := Decode(r)
		err2 := s2.ApplyDecoded(&d, 2)
		if fmt.Sprint(err) != fmt.Sprint(err2) {
			t.Fatalf("ApplyDecoded = %v, want Apply's %v", err2, err)
		}
		if diff := cmp.Diff(m.Services, s2.Snapshot().Services, ignoreMemo); diff != "" {
			t.Fatalf("Apply and ApplyDecoded differ (-Apply +ApplyDecoded):\n%s", diff)
		}
		for _, svc := range m.Services {
			for _, p := range svc.Ports {
				for _, e := range p.Endpoints {
					if e.Address == "" || e.Port < 1 || e.Port > 65535 {
						t.Fatalf("bad endpoint %+v", e)
					}
				}
			}
		}
	})
}

// TestReserve: a reserved store builds the same mesh as one that grew,
// and a store that holds objects keeps them.
func TestReserve(t *testing.T) {
	http80 := svcPort{name: "http", port: 80, target: intstr.FromInt32(8080)}
	recs := []rec{
		add("c1", service("shop", "web", "10.0.0.1", http80)),
		add("c1", slice("shop", "web-1", "web", []slicePort{named("http", 9090)}, ep{addr: "10.1.0.1"})),
	}
	grown := NewStore()
	applyAll(t, grown, recs...)
	reserved := NewStore()
	reserved.Reserve(Reservation{Objects: 1000, Services: 500, EndpointSlices: 500})
	applyAll(t, reserved, recs...)
	if diff := cmp.Diff(grown.Snapshot().Services, reserved.Snapshot().Services, ignoreMemo); diff != "" {
		t.Fatalf("reserved store's mesh (-grown +reserved):\n%s", diff)
	}
	reserved.Reserve(Reservation{Objects: 10, Services: 10, EndpointSlices: 10})
	if got := reserved.Len(); got != 2 {
		t.Fatalf("Reserve on a store holding objects left %d of them, want 2", got)
	}
	if diff := cmp.Diff(grown.Snapshot().Services, reserved.Snapshot().Services, ignoreMemo); diff != "" {
		t.Fatalf("mesh after a Reserve on a store holding objects (-want +got):\n%s", diff)
	}
}
