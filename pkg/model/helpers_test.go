package model

import (
	"encoding/json"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// rec is a change record in a test, before it is turned into a protobuf.
type rec struct {
	cluster string
	op      pb.Op
	obj     any    // *corev1.Service, *discoveryv1.EndpointSlice or *unstructuredObj
	raw     []byte // used instead of obj when set
	ref     *pb.ObjectRef
}

type unstructuredObj struct {
	group, kind, namespace, name string
	body                         map[string]any
}

func (r rec) proto(t testing.TB) *pb.ChangeRecord {
	t.Helper()
	out := &pb.ChangeRecord{Cluster: r.cluster, Op: r.op, Ref: r.ref, Object: r.raw}
	var meta metav1.ObjectMeta
	switch o := r.obj.(type) {
	case *corev1.Service:
		meta = o.ObjectMeta
		if out.Ref == nil {
			out.Ref = &pb.ObjectRef{Version: "v1", Kind: KindService, Namespace: o.Namespace, Name: o.Name}
		}
	case *discoveryv1.EndpointSlice:
		meta = o.ObjectMeta
		if out.Ref == nil {
			out.Ref = &pb.ObjectRef{Group: GroupDiscovery, Version: "v1", Kind: KindEndpointSlice, Namespace: o.Namespace, Name: o.Name}
		}
	case *unstructuredObj:
		if out.Ref == nil {
			out.Ref = &pb.ObjectRef{Group: o.group, Version: "v1", Kind: o.kind, Namespace: o.namespace, Name: o.name}
		}
		if out.Object == nil {
			b, err := json.Marshal(o.body)
			if err != nil {
				t.Fatal(err)
			}
			out.Object = b
		}
		return out
	case nil:
		return out
	}
	out.Uid, out.ResourceVersion = string(meta.UID), meta.ResourceVersion
	if out.Object == nil {
		b, err := json.Marshal(r.obj)
		if err != nil {
			t.Fatal(err)
		}
		out.Object = b
	}
	return out
}

func add(cluster string, obj any) rec { return rec{cluster: cluster, op: pb.Op_OP_ADD, obj: obj} }
func upd(cluster string, obj any) rec { return rec{cluster: cluster, op: pb.Op_OP_UPDATE, obj: obj} }
func del(cluster string, obj any) rec { return rec{cluster: cluster, op: pb.Op_OP_DELETE, obj: obj} }

// applyAll applies records with sequences 1, 2, ... and fails on any error.
func applyAll(t testing.TB, s *Store, recs ...rec) {
	t.Helper()
	for _, r := range recs {
		seq := s.AppliedSeq() + 1
		if err := s.Apply(r.proto(t), seq); err != nil {
			t.Fatalf("Apply(seq %d): %v", seq, err)
		}
	}
}

type svcPort struct {
	name, proto, appProto string
	port                  int32
	target                intstr.IntOrString
}

func service(ns, name, clusterIP string, ports ...svcPort) *corev1.Service {
	s := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
		Spec:       corev1.ServiceSpec{ClusterIP: clusterIP},
	}
	for _, p := range ports {
		sp := corev1.ServicePort{Name: p.name, Port: p.port, Protocol: corev1.Protocol(p.proto), TargetPort: p.target}
		if p.appProto != "" {
			sp.AppProtocol = &p.appProto
		}
		s.Spec.Ports = append(s.Spec.Ports, sp)
	}
	return s
}

type ep struct {
	addr, zone, node string
	ready            *bool
}

type slicePort struct {
	name  *string
	proto string
	port  *int32
}

func slice(ns, name, svc string, ports []slicePort, eps ...ep) *discoveryv1.EndpointSlice {
	s := &discoveryv1.EndpointSlice{
		TypeMeta:    metav1.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta:  metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), ResourceVersion: "1"},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	if svc != "" {
		s.Labels = map[string]string{discoveryv1.LabelServiceName: svc}
	}
	for _, p := range ports {
		sp := discoveryv1.EndpointPort{Name: p.name, Port: p.port}
		if p.proto != "" {
			pr := corev1.Protocol(p.proto)
			sp.Protocol = &pr
		}
		s.Ports = append(s.Ports, sp)
	}
	for _, e := range eps {
		de := discoveryv1.Endpoint{Addresses: []string{e.addr}, Conditions: discoveryv1.EndpointConditions{Ready: e.ready}}
		if e.zone != "" {
			de.Zone = &e.zone
		}
		if e.node != "" {
			de.NodeName = &e.node
		}
		s.Endpoints = append(s.Endpoints, de)
	}
	return s
}

func ptr[T any](v T) *T { return &v }

func named(name string, port int32) slicePort { return slicePort{name: ptr(name), port: ptr(port)} }
