package pusher

import (
	"fmt"
	"testing"

	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// TestNeedsPushScope: a full push reaches a connection only when its
// scope (the Sidecar egress its frontend reported) depends on a changed
// config, unless the scope is unknown or may be stale.
func TestNeedsPushScope(t *testing.T) {
	scoped := func(imports ...string) *pb.ConnectionInfo {
		return &pb.ConnectionInfo{Namespace: "app", Scope: &pb.Scope{Seq: 10, RootNamespace: "istio-system", Imports: imports, BackedNamespaces: []string{"app", "backs"}},
			Watches: []*pb.Watch{{TypeUrl: resource.EndpointType, Names: []string{"outbound|80||watched.far.svc.cluster.local"}}}}
	}
	full := func(keys ...*pb.ConfigKey) *request {
		return newRequest(&pb.PushRequest{Full: true, ThroughSeq: 20, ConfigKeys: keys}, zeroTime)
	}
	key := func(kind, ns, name string) *pb.ConfigKey { return &pb.ConfigKey{Kind: kind, Namespace: ns, Name: name} }
	own := scoped("app/*")
	tests := []struct {
		name        string
		conn        *pb.ConnectionInfo
		scopeChange uint64
		req         *request
		want        bool
	}{
		{name: "service of another namespace", conn: own, req: full(key("Service", "other", "a")), want: false},
		{name: "service of its namespace", conn: own, req: full(key("Service", "app", "a")), want: true},
		{name: "service it backs", conn: own, req: full(key("Service", "backs", "a")), want: true},
		{name: "imported host", conn: scoped("app/*", "other/a.other.svc.cluster.local"), req: full(key("Service", "other", "a")), want: true},
		{name: "host not imported", conn: scoped("app/*", "other/a.other.svc.cluster.local"), req: full(key("Service", "other", "b")), want: false},
		{name: "wildcard namespace import", conn: scoped("*/*.other.svc.cluster.local"), req: full(key("Service", "other", "b")), want: true},
		{name: "watched load assignment", conn: own, req: full(key("Service", "far", "watched")), want: true},
		{name: "destination rule elsewhere", conn: own, req: full(key("DestinationRule", "other", "r")), want: false},
		{name: "destination rule of the root namespace", conn: own, req: full(key("DestinationRule", "istio-system", "r")), want: true},
		{name: "service entry of an imported namespace", conn: scoped("app/*", "other/x.example.com"), req: full(key("ServiceEntry", "other", "se")), want: true},
		{name: "its Sidecar", conn: own, req: full(key("Sidecar", "app", "default")), want: true},
		{name: "the root Sidecar", conn: own, req: full(key("Sidecar", "istio-system", "default")), want: true},
		{name: "another namespace's Sidecar", conn: own, req: full(key("Sidecar", "other", "default")), want: false},
		{name: "kind the scope does not know", conn: own, req: full(key("VirtualService", "other", "vs")), want: true},
		{name: "one key in scope is enough", conn: own, req: full(key("Service", "other", "a"), key("Service", "app", "b")), want: true},
		{name: "no keys", conn: own, req: full(), want: true},
		{name: "no scope", conn: &pb.ConnectionInfo{Namespace: "app"}, req: full(key("Service", "other", "a")), want: true},
		{name: "not limited", conn: &pb.ConnectionInfo{Namespace: "app", Scope: &pb.Scope{Seq: 10, All: true}}, req: full(key("Service", "other", "a")), want: true},
		{name: "scope older than a change that may alter it", conn: own, scopeChange: 11, req: full(key("Service", "other", "a")), want: true},
		{name: "scope renewed since", conn: own, scopeChange: 10, req: full(key("Service", "other", "a")), want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := needsPush(&connState{info: tc.conn, scopeChange: tc.scopeChange}, tc.req); got != tc.want {
				t.Errorf("needsPush() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestAffectsScope(t *testing.T) {
	ci := &pb.ConnectionInfo{Namespace: "app", Scope: &pb.Scope{RootNamespace: "istio-system"}}
	full := func(keys ...*pb.ConfigKey) *request {
		return newRequest(&pb.PushRequest{Full: true, ConfigKeys: keys}, zeroTime)
	}
	for _, tc := range []struct {
		name string
		req  *request
		want bool
	}{
		{"its Sidecar", full(&pb.ConfigKey{Kind: "Sidecar", Namespace: "app", Name: "s"}), true},
		{"the root Sidecar", full(&pb.ConfigKey{Kind: "Sidecar", Namespace: "istio-system", Name: "s"}), true},
		{"another Sidecar", full(&pb.ConfigKey{Kind: "Sidecar", Namespace: "other", Name: "s"}), false},
		{"a Service", full(&pb.ConfigKey{Kind: "Service", Namespace: "app", Name: "a"}), false},
		{"no keys (catch-up)", catchUp(5, zeroTime), true},
		{"endpoints", newRequest(&pb.PushRequest{ConfigKeys: []*pb.ConfigKey{{Kind: "Service", Namespace: "app", Name: "a"}}}, zeroTime), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := affectsScope(ci, tc.req); got != tc.want {
				t.Errorf("affectsScope() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNeedsPush(t *testing.T) {
	watching := func(names ...string) *pb.ConnectionInfo {
		return &pb.ConnectionInfo{Watches: []*pb.Watch{{TypeUrl: resource.EndpointType, Names: names}}}
	}
	key := func(kind, ns, name string) *request {
		return newRequest(&pb.PushRequest{ConfigKeys: []*pb.ConfigKey{{Kind: kind, Namespace: ns, Name: name}}}, zeroTime)
	}
	tests := []struct {
		name string
		conn *pb.ConnectionInfo
		req  *request
		want bool
	}{
		{name: "full reaches everyone", conn: &pb.ConnectionInfo{}, req: newRequest(&pb.PushRequest{Full: true}, zeroTime), want: true},
		{name: "endpoints of a watched service", conn: watching("outbound|80||a.ns.svc.cluster.local"), req: key("Service", "ns", "a"), want: true},
		{name: "endpoints of a watched subset", conn: watching("outbound|80|v1|a.ns.svc.cluster.local"), req: key("Service", "ns", "a"), want: true},
		{name: "endpoints of another service", conn: watching("outbound|80||b.ns.svc.cluster.local"), req: key("Service", "ns", "a"), want: false},
		{name: "same name, other namespace", conn: watching("outbound|80||a.other.svc.cluster.local"), req: key("Service", "ns", "a"), want: false},
		{name: "no EDS watch", conn: &pb.ConnectionInfo{}, req: key("Service", "ns", "a"), want: false},
		{name: "wildcard EDS", conn: &pb.ConnectionInfo{Watches: []*pb.Watch{{TypeUrl: resource.EndpointType, Wildcard: true}}}, req: key("Service", "ns", "a"), want: true},
		{name: "pod change", conn: watching("outbound|80||a.ns.svc.cluster.local"), req: key("Pod", "ns", "a-0"), want: false},
		{name: "unknown endpoint key", conn: watching("outbound|80||a.ns.svc.cluster.local"), req: key("ServiceEntry", "ns", "x"), want: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := needsPush(&connState{info: tc.conn}, tc.req); got != tc.want {
				t.Errorf("needsPush() = %v, want %v", got, tc.want)
			}
		})
	}
}

// BenchmarkNeedsPush measures the scoping decision for one connection: a
// full push of a Service change and an endpoint push, against a sidecar
// watching 100 load assignments whose Sidecar imports three namespaces,
// none the changed service's.
func BenchmarkNeedsPush(b *testing.B) {
	names := make([]string, 100)
	for i := range names {
		names[i] = fmt.Sprintf("outbound|80||svc-%03d.ns-%d.svc.cluster.local", i, i%10)
	}
	ci := &pb.ConnectionInfo{Namespace: "ns-0", Watches: []*pb.Watch{{TypeUrl: resource.EndpointType, Names: names}},
		Scope: &pb.Scope{Seq: 1, RootNamespace: "istio-system", Imports: []string{"ns-0/*", "istio-system/*", "ns-1/*"}}}
	for _, bc := range []struct {
		name string
		full bool
	}{{"full", true}, {"eds", false}} {
		b.Run(bc.name, func(b *testing.B) {
			req := newRequest(&pb.PushRequest{Full: bc.full, ConfigKeys: []*pb.ConfigKey{{Kind: "Service", Namespace: "ns-7", Name: "svc-999"}}}, zeroTime)
			c := &connState{info: ci}
			b.ReportAllocs()
			for b.Loop() {
				if needsPush(c, req) {
					b.Fatal("pushed out of scope")
				}
			}
		})
	}
}
