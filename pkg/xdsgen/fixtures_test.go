package xdsgen

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/pilotwire/pilotwire/pkg/model"
)

// port is a TCP service port with endpoints.
func port(name string, number int32, eps ...model.Endpoint) *model.Port {
	return &model.Port{Name: name, Port: number, Protocol: corev1.ProtocolTCP, Endpoints: eps}
}

func appPort(name, appProtocol string, number int32) *model.Port {
	p := port(name, number)
	p.AppProtocol = appProtocol
	return p
}

func svc(ns, name, clusterIP string, ports ...*model.Port) *model.Service {
	return &model.Service{
		Name: name, Namespace: ns, Hostname: model.Hostname(ns, name),
		ClusterIP: clusterIP, Clusters: []string{"c1"}, Ports: ports,
	}
}

func endpoint(addr string, port int32, zone, cluster string) model.Endpoint {
	return model.Endpoint{Address: addr, Port: port, Zone: zone, ClusterID: cluster}
}

func mesh(t testing.TB, services ...*model.Service) *model.Mesh {
	t.Helper()
	m, err := model.NewMesh(1, services)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// variedMesh exercises every branch of the generators: HTTP, HTTP/2, gRPC,
// TCP, unnamed and UDP ports; headless and ExternalName services; the same
// short name in two namespaces; endpoints in several zones and clusters;
// IPv6; a service without endpoints.
func variedMesh(t testing.TB) *model.Mesh {
	headless := svc("shop", "db", "", port("tcp-postgres", 5432, endpoint("10.1.3.1", 5432, "z1", "c1")))
	headless.Headless = true
	ext := svc("shop", "ext", "")
	ext.ExternalName = "example.com"
	ext.Ports = []*model.Port{port("http", 80)}
	dns := svc("kube-system", "dns", "10.0.0.10",
		port("dns-tcp", 53, endpoint("10.1.4.1", 53, "", "c1")),
		&model.Port{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, Endpoints: []model.Endpoint{endpoint("10.1.4.1", 53, "", "c1")}})
	return mesh(t,
		svc("shop", "web", "10.0.0.1",
			port("http", 80,
				endpoint("10.1.0.1", 8080, "z1", "c1"),
				endpoint("10.1.0.2", 8080, "z2", "c2"),
				endpoint("10.1.0.3", 8080, "z1", "c2"),
				endpoint("10.1.0.4", 8080, "", "c1")),
			port("grpc-api", 9090, endpoint("10.1.0.1", 9091, "z1", "c1")),
		),
		svc("other", "web", "10.0.0.2", port("", 80, endpoint("10.2.0.1", 80, "z1", "c1"))),
		svc("shop", "api", "10.0.0.3",
			port("redis", 6379, endpoint("10.1.1.1", 6379, "z1", "c1")),
			appPort("api", "kubernetes.io/h2c", 8080),
		),
		svc("shop", "v6", "fd00::1", port("mongo", 27017, endpoint("fd00:1::1", 27017, "z1", "c1"))),
		svc("shop", "empty", "10.0.0.4", port("http-web", 8000)),
		headless, ext, dns,
	)
}

// bigMesh has n services with one HTTP port and k endpoints each, spread over
// three zones.
func bigMesh(t testing.TB, n, k int) *model.Mesh {
	services := make([]*model.Service, n)
	for i := range services {
		eps := make([]model.Endpoint, k)
		for j := range eps {
			eps[j] = endpoint(fmt.Sprintf("10.%d.%d.%d", i/250, i%250, j+1), 8080, fmt.Sprintf("zone-%d", j%3), "c1")
		}
		services[i] = svc("ns", fmt.Sprintf("svc-%04d", i), fmt.Sprintf("10.96.%d.%d", i/250, i%250), port("http", 80, eps...))
	}
	return mesh(t, services...)
}

func corev1Protocol(s string) corev1.Protocol { return corev1.Protocol(s) }

func corev1ServicePort(name string, port int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port}
}
