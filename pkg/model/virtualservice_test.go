package model

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func vsNames(vss []*VirtualService) []string {
	var out []string
	for _, v := range vss {
		out = append(out, v.Namespace+"/"+v.Name)
	}
	return out
}

func problemsOf(m *Mesh, kind string) []string {
	var out []string
	for _, p := range m.Problems() {
		if strings.Contains(p.Object, "/"+kind+"/") {
			out = append(out, p.Object+": "+p.Reason)
		}
	}
	return out
}

func route(host, subset string, weight int) map[string]any {
	d := map[string]any{"host": host}
	if subset != "" {
		d["subset"] = subset
	}
	r := map[string]any{"destination": d}
	if weight > 0 {
		r["weight"] = weight
	}
	return r
}

func TestVirtualServiceIndex(t *testing.T) {
	s := NewStore()
	applyAll(t, s,
		add("c1", service("ns", "web", "10.0.0.1", svcPort{name: "http", port: 80})),
		// Oldest public VirtualService for web: sidecars use it.
		add("c1", istioObj(KindVirtualService, "ns", "web-a", "2024-01-01T00:00:00Z", map[string]any{
			"hosts": []any{"web"},
			"http":  []any{map[string]any{"route": []any{route("web", "v1", 0)}}},
		})),
		// A newer one for the same host: a conflict for sidecars.
		add("c1", istioObj(KindVirtualService, "ns", "web-b", "2024-02-01T00:00:00Z", map[string]any{
			"hosts": []any{"web.ns.svc.cluster.local"},
			"http":  []any{map[string]any{"route": []any{route("web", "v2", 0)}}},
		})),
		// Private to other: only proxies there see it, before public ones.
		add("c1", istioObj(KindVirtualService, "other", "web-private", "2024-03-01T00:00:00Z", map[string]any{
			"hosts":    []any{"web.ns.svc.cluster.local"},
			"exportTo": []any{"."},
			"http":     []any{map[string]any{"route": []any{route("web.ns.svc.cluster.local", "", 0)}}},
		})),
		// Bound to a gateway only.
		add("c1", istioObj(KindVirtualService, "ns", "web-gw", "2024-01-01T00:00:00Z", map[string]any{
			"hosts":    []any{"web.example.com"},
			"gateways": []any{"ingress"},
			"http":     []any{map[string]any{"route": []any{route("web", "", 0)}}},
		})),
	)
	m := s.Snapshot()
	host := Hostname("ns", "web")
	if got := vsNames(m.VirtualServices("ns", MeshGateway)); !slices.Equal(got, []string{"ns/web-a", "ns/web-b"}) {
		t.Errorf("ns sees %v", got)
	}
	if got := vsNames(m.VirtualServices("other", MeshGateway)); !slices.Equal(got, []string{"other/web-private", "ns/web-a", "ns/web-b"}) {
		t.Errorf("other sees %v", got)
	}
	if got := vsNames(m.VirtualServices("any", "ns/ingress")); !slices.Equal(got, []string{"ns/web-gw"}) {
		t.Errorf("gateway ns/ingress has %v", got)
	}
	if v := m.VirtualServiceFor("ns", host); v == nil || v.Name != "web-a" {
		t.Errorf("ns uses %v for %s, want web-a", v, host)
	}
	if v := m.VirtualServiceFor("other", host); v == nil || v.Name != "web-private" {
		t.Errorf("other uses %v for %s, want web-private", v, host)
	}
	if got := m.VirtualServiceFor("ns", host).Spec.GetHttp()[0].GetRoute()[0].GetDestination().GetHost(); got != host {
		t.Errorf("short destination host resolved to %q", got)
	}
	want := []string{
		"c1/VirtualService/ns/web-a: http[0].route[0]: subset \"v1\" of web.ns.svc.cluster.local is defined by no DestinationRule: requests to it fail (503 NC)",
		"c1/VirtualService/ns/web-b: host web.ns.svc.cluster.local is already routed for sidecars by ns/web-a (older): this one's http routes for the host are ignored by sidecars",
		"c1/VirtualService/ns/web-b: http[0].route[0]: subset \"v2\" of web.ns.svc.cluster.local is defined by no DestinationRule: requests to it fail (503 NC)",
	}
	if diff := cmp.Diff(want, problemsOf(m, KindVirtualService)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}

	// An unrelated change keeps the VirtualService pointers.
	applyAll(t, s, add("c1", service("ns", "db", "10.0.0.2", svcPort{name: "tcp", port: 5432})))
	if m2 := s.Snapshot(); m2.VirtualServiceFor("ns", host) != m.VirtualServiceFor("ns", host) {
		t.Error("a service change rebuilt the VirtualServices")
	}
	// A change of one VirtualService is a new mesh config.
	applyAll(t, s, upd("c1", istioObj(KindVirtualService, "ns", "web-a", "2024-01-01T00:00:00Z", map[string]any{
		"hosts": []any{"web"},
		"http":  []any{map[string]any{"route": []any{route("web", "", 0)}}},
	})))
	m3 := s.Snapshot()
	if m3.VirtualServiceFor("ns", host) == m.VirtualServiceFor("ns", host) {
		t.Error("an edited VirtualService kept its pointer")
	}
	applyAll(t, s, del("c1", istioObj(KindVirtualService, "ns", "web-a", "", nil)))
	if v := s.Snapshot().VirtualServiceFor("ns", host); v == nil || v.Name != "web-b" {
		t.Errorf("after delete ns uses %v, want web-b", v)
	}
}

func TestVirtualServiceDelegate(t *testing.T) {
	s := NewStore()
	applyAll(t, s,
		add("c1", service("ns", "web", "10.0.0.1", svcPort{name: "http", port: 80})),
		add("c1", istioObj(KindVirtualService, "ns", "root", "2024-01-01T00:00:00Z", map[string]any{
			"hosts": []any{"web"},
			"http": []any{
				map[string]any{"name": "api", "match": []any{map[string]any{"uri": map[string]any{"prefix": "/api"}}},
					"timeout": "5s", "delegate": map[string]any{"name": "api", "namespace": "team"}},
				map[string]any{"match": []any{map[string]any{"uri": map[string]any{"prefix": "/x"}}},
					"delegate": map[string]any{"name": "missing"}},
				map[string]any{"match": []any{map[string]any{"uri": map[string]any{"prefix": "/p"}}},
					"delegate": map[string]any{"name": "private", "namespace": "team"}},
				map[string]any{"route": []any{route("web", "", 0)}},
			},
		})),
		add("c1", istioObj(KindVirtualService, "team", "api", "2024-01-01T00:00:00Z", map[string]any{
			"http": []any{
				map[string]any{"name": "v2", "match": []any{map[string]any{"uri": map[string]any{"prefix": "/api/v2"}}},
					"route": []any{route("web.ns.svc.cluster.local", "", 0)}},
				// Outside the root's /api: ignored.
				map[string]any{"match": []any{map[string]any{"uri": map[string]any{"prefix": "/other"}}},
					"route": []any{route("web.ns.svc.cluster.local", "", 0)}},
				map[string]any{"route": []any{route("web.ns.svc.cluster.local", "", 0)}},
			},
		})),
		add("c1", istioObj(KindVirtualService, "team", "private", "2024-01-01T00:00:00Z", map[string]any{
			"exportTo": []any{"."},
			"http":     []any{map[string]any{"route": []any{route("web.ns.svc.cluster.local", "", 0)}}},
		})),
		add("c1", istioObj(KindVirtualService, "team", "orphan", "2024-01-01T00:00:00Z", map[string]any{
			"http": []any{map[string]any{"route": []any{route("web.ns.svc.cluster.local", "", 0)}}},
		})),
	)
	m := s.Snapshot()
	v := m.VirtualServiceFor("ns", Hostname("ns", "web"))
	if v == nil {
		t.Fatal("no VirtualService for web")
	}
	type got struct {
		Name, Match, Timeout string
	}
	var routes []got
	for _, h := range v.Spec.GetHttp() {
		g := got{Name: h.GetName(), Timeout: h.GetTimeout().AsDuration().String()}
		for _, mt := range h.GetMatch() {
			g.Match += mt.GetUri().GetPrefix()
		}
		routes = append(routes, g)
	}
	wantRoutes := []got{{"api-v2", "/api/v2", "5s"}, {"api", "/api", "5s"}, {"", "", "0s"}}
	if diff := cmp.Diff(wantRoutes, routes); diff != "" {
		t.Errorf("merged routes (-want +got):\n%s", diff)
	}
	if !slices.Equal(v.From, []string{"ns/root", "team/api"}) {
		t.Errorf("From = %v", v.From)
	}
	want := []string{
		"c1/VirtualService/ns/root: http[1]: delegate ns/missing is not a VirtualService without hosts: route ignored",
		"c1/VirtualService/ns/root: http[2]: delegate team/private is not exported to namespace ns: route ignored",
		"c1/VirtualService/team/api: http[1]: its match is not within the match of ns/root http[0] that delegates to it: route ignored",
		"c1/VirtualService/team/orphan: spec.hosts is empty and no VirtualService delegates to it: ignored",
	}
	if diff := cmp.Diff(want, problemsOf(m, KindVirtualService)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
	// Editing the delegate changes the root.
	applyAll(t, s, upd("c1", istioObj(KindVirtualService, "team", "api", "2024-01-01T00:00:00Z", map[string]any{
		"http": []any{map[string]any{"route": []any{route("web.ns.svc.cluster.local", "", 0)}}},
	})))
	if n := len(s.Snapshot().VirtualServiceFor("ns", Hostname("ns", "web")).Spec.GetHttp()); n != 2 {
		t.Errorf("after the delegate's edit the root has %d routes, want 2", n)
	}
}

func TestVirtualServiceSidecarScope(t *testing.T) {
	s := NewStore()
	applyAll(t, s,
		add("c1", service("ns", "web", "10.0.0.1", svcPort{name: "http", port: 80})),
		add("c1", istioObj(KindVirtualService, "ns", "web", "2024-01-01T00:00:00Z", map[string]any{
			"hosts": []any{"web"},
			"http":  []any{map[string]any{"route": []any{route("web", "", 0)}}},
		})),
	)
	// The client sees the VirtualService, until a Sidecar scopes it out.
	if got := s.Snapshot().VirtualServiceFor("client", Hostname("ns", "web")); got == nil {
		t.Fatal("client does not see the VirtualService without a Sidecar")
	}
	applyAll(t, s, add("c1", istioObj(KindSidecar, "client", "default", "2024-01-01T00:00:00Z", map[string]any{
		"egress": []any{map[string]any{"hosts": []any{"other/*"}}},
	})))
	m := s.Snapshot()
	if got := m.VirtualServiceFor("client", Hostname("ns", "web")); got != nil {
		t.Errorf("after the Sidecar, client still uses %s", got.Name)
	}
	if got := m.VirtualServices("client", MeshGateway); len(got) != 0 {
		t.Errorf("a Sidecar importing only other/* sees %v", vsNames(got))
	}
	if got := m.VirtualServices("ns", MeshGateway); len(got) != 1 {
		t.Errorf("ns sees %v", vsNames(got))
	}
}

func TestGatewayIndex(t *testing.T) {
	s := NewStore()
	applyAll(t, s,
		add("c1", istioObj(KindGateway, "istio-system", "ingress", "2024-01-01T00:00:00Z", map[string]any{
			"selector": map[string]any{"istio": "ingressgateway"},
			"servers": []any{
				map[string]any{"port": map[string]any{"number": 80, "name": "http", "protocol": "HTTP"}, "hosts": []any{"*"}},
				map[string]any{"port": map[string]any{"number": 443, "name": "https", "protocol": "HTTPS"}, "hosts": []any{"*"},
					"tls": map[string]any{"mode": "SIMPLE", "serverCertificate": "/etc/cert.pem"}},
			},
		})),
	)
	m := s.Snapshot()
	gws := m.GatewaysFor(map[string]string{"istio": "ingressgateway", "app": "x"})
	if len(gws) != 1 || len(gws[0].Servers) != 1 || gws[0].Ref() != "istio-system/ingress" {
		t.Fatalf("gateways = %v", gws)
	}
	if got := m.GatewaysFor(map[string]string{"app": "x"}); len(got) != 0 {
		t.Errorf("unselected labels got %v", got)
	}
	want := []string{"c1/Gateway/istio-system/ingress: servers[1]: tls needs credentialName (certificates are referenced by name over SDS; file paths are not supported): server ignored"}
	if diff := cmp.Diff(want, problemsOf(m, KindGateway)); diff != "" {
		t.Errorf("problems (-want +got):\n%s", diff)
	}
}
