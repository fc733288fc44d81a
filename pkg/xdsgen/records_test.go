package xdsgen

import (
	"encoding/json"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/pilotwire/pilotwire/pkg/model"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// Change records for tests that go through a model.Store.

func record(t testing.TB, cluster string, op pb.Op, obj any) *pb.ChangeRecord {
	t.Helper()
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	r := &pb.ChangeRecord{Cluster: cluster, Op: op, Object: b}
	switch o := obj.(type) {
	case *corev1.Service:
		r.Ref = &pb.ObjectRef{Version: "v1", Kind: model.KindService, Namespace: o.Namespace, Name: o.Name}
	case *discoveryv1.EndpointSlice:
		r.Ref = &pb.ObjectRef{Group: model.GroupDiscovery, Version: "v1", Kind: model.KindEndpointSlice, Namespace: o.Namespace, Name: o.Name}
	default:
		t.Fatalf("unexpected %T", obj)
	}
	return r
}

func k8sService(ns, name, ip string, ports ...corev1.ServicePort) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{ClusterIP: ip, Ports: ports},
	}
}

func k8sSlice(ns, name, svc, portName string, port int32, zone string, addrs ...string) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port}},
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Zone: &zone})
	}
	return s
}

// meshRecords describes n services, each with an HTTP and a gRPC port and
// two endpoints in each of two clusters.
func meshRecords(t testing.TB, n int) []*pb.ChangeRecord {
	var recs []*pb.ChangeRecord
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		recs = append(recs, record(t, "c1", pb.Op_OP_ADD, k8sService("ns", name, fmt.Sprintf("10.96.0.%d", i+1),
			corev1.ServicePort{Name: "http", Port: 80}, corev1.ServicePort{Name: "grpc", Port: 9090})))
		for _, c := range []string{"c1", "c2"} {
			for _, p := range []struct {
				name string
				port int32
			}{{"http", 8080}, {"grpc", 9090}} {
				recs = append(recs, record(t, c, pb.Op_OP_ADD, k8sSlice("ns", name+"-"+p.name, name, p.name, p.port, "zone-"+c,
					fmt.Sprintf("10.%s.%d.1", c[1:], i), fmt.Sprintf("10.%s.%d.2", c[1:], i))))
			}
		}
	}
	return recs
}

func storeWith(t testing.TB, recs []*pb.ChangeRecord) *model.Store {
	t.Helper()
	s := model.NewStore()
	for i, r := range recs {
		if err := s.Apply(r, uint64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	return s
}
