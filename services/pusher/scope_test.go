package pusher

import (
	"testing"

	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

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
			if got := needsPush(tc.conn, tc.req); got != tc.want {
				t.Errorf("needsPush() = %v, want %v", got, tc.want)
			}
		})
	}
}
