package model

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
)

func peerAuthn(ns, name, created string, spec map[string]any) *unstructuredObj {
	o := istioObj(KindPeerAuthentication, ns, name, created, spec)
	o.group = GroupSecurity
	return o
}

func mtlsSpec(mode string) map[string]any {
	return map[string]any{"mtls": map[string]any{"mode": mode}}
}

func workloadSpec(mode string, labels map[string]any, ports map[string]any) map[string]any {
	spec := map[string]any{"selector": map[string]any{"matchLabels": labels}}
	if mode != "" {
		spec["mtls"] = map[string]any{"mode": mode}
	}
	if ports != nil {
		spec["portLevelMtls"] = ports
	}
	return spec
}

// TestPeerAuthenticationResolution: Istio's ComposePeerAuthentication.
// Mesh (root namespace) < namespace < workload, each set mode overriding,
// UNSET inheriting, PERMISSIVE without any; the oldest policy of a level
// wins; a workload policy's port-level modes override its mode on those
// ports, UNSET taking the workload's mode. Services see the mesh and
// namespace level only (what clients assume: BestEffortInferServiceMTLSMode).
func TestPeerAuthenticationResolution(t *testing.T) {
	app := map[string]string{"app": "web"}
	other := map[string]string{"app": "db"}
	tests := []struct {
		name     string
		objs     []*unstructuredObj
		ns       string
		labels   map[string]string
		want     PeerAuthn
		wantSvc  MTLSMode // the mode of a service in ns
		problems int
	}{
		{name: "no policy: permissive", ns: "shop", labels: app, want: PeerAuthn{Mode: MTLSPermissive}},
		{
			name: "mesh strict", ns: "shop", labels: app,
			objs:    []*unstructuredObj{peerAuthn("istio-system", "default", "", mtlsSpec("STRICT"))},
			want:    PeerAuthn{Mode: MTLSStrict},
			wantSvc: MTLSStrict,
		},
		{
			name: "namespace overrides mesh", ns: "shop", labels: app,
			objs: []*unstructuredObj{
				peerAuthn("istio-system", "default", "", mtlsSpec("STRICT")),
				peerAuthn("shop", "ns", "", mtlsSpec("DISABLE")),
			},
			want:    PeerAuthn{Mode: MTLSDisable},
			wantSvc: MTLSDisable,
		},
		{
			name: "namespace UNSET inherits the mesh", ns: "shop", labels: app,
			objs: []*unstructuredObj{
				peerAuthn("istio-system", "default", "", mtlsSpec("STRICT")),
				peerAuthn("shop", "ns", "", mtlsSpec("UNSET")),
			},
			want:    PeerAuthn{Mode: MTLSStrict},
			wantSvc: MTLSStrict,
		},
		{
			name: "another namespace's policy does not apply", ns: "shop", labels: app,
			objs:    []*unstructuredObj{peerAuthn("other", "ns", "", mtlsSpec("STRICT"))},
			want:    PeerAuthn{Mode: MTLSPermissive},
			wantSvc: MTLSPermissive,
		},
		{
			name: "workload overrides namespace; services do not see it", ns: "shop", labels: app,
			objs: []*unstructuredObj{
				peerAuthn("shop", "ns", "", mtlsSpec("STRICT")),
				peerAuthn("shop", "web", "", workloadSpec("DISABLE", map[string]any{"app": "web"}, nil)),
			},
			want:    PeerAuthn{Mode: MTLSDisable},
			wantSvc: MTLSStrict,
		},
		{
			name: "workload policy that does not select", ns: "shop", labels: other,
			objs: []*unstructuredObj{
				peerAuthn("shop", "ns", "", mtlsSpec("STRICT")),
				peerAuthn("shop", "web", "", workloadSpec("DISABLE", map[string]any{"app": "web"}, nil)),
			},
			want:    PeerAuthn{Mode: MTLSStrict},
			wantSvc: MTLSStrict,
		},
		{
			name: "port level: set, and UNSET taking the workload's mode", ns: "shop", labels: app,
			objs: []*unstructuredObj{
				peerAuthn("istio-system", "default", "", mtlsSpec("STRICT")),
				peerAuthn("shop", "web", "", workloadSpec("", map[string]any{"app": "web"}, map[string]any{
					"8080": map[string]any{"mode": "DISABLE"}, "9090": map[string]any{"mode": "UNSET"},
				})),
			},
			want:    PeerAuthn{Mode: MTLSStrict, PortModes: map[uint32]MTLSMode{8080: MTLSDisable, 9090: MTLSStrict}},
			wantSvc: MTLSStrict,
		},
		{
			name: "oldest namespace policy wins, the other is reported", ns: "shop", labels: app,
			objs: []*unstructuredObj{
				peerAuthn("shop", "b", "2024-01-01T00:00:00Z", mtlsSpec("STRICT")),
				peerAuthn("shop", "a", "2024-02-01T00:00:00Z", mtlsSpec("DISABLE")),
			},
			want:     PeerAuthn{Mode: MTLSStrict},
			wantSvc:  MTLSStrict,
			problems: 1,
		},
		{
			name: "oldest workload policy wins", ns: "shop", labels: app,
			objs: []*unstructuredObj{
				peerAuthn("shop", "new", "2024-02-01T00:00:00Z", workloadSpec("DISABLE", map[string]any{"app": "web"}, nil)),
				peerAuthn("shop", "old", "2024-01-01T00:00:00Z", workloadSpec("STRICT", map[string]any{"app": "web"}, nil)),
			},
			want: PeerAuthn{Mode: MTLSStrict},
		},
		{
			name: "selector in the root namespace applies to no one", ns: "istio-system", labels: app,
			objs: []*unstructuredObj{
				peerAuthn("istio-system", "web", "", workloadSpec("STRICT", map[string]any{"app": "web"}, nil)),
			},
			want:     PeerAuthn{Mode: MTLSPermissive},
			problems: 1,
		},
		{
			name: "port level without selector and port 0 are reported and ignored", ns: "shop", labels: app,
			objs: []*unstructuredObj{
				peerAuthn("shop", "ns", "", map[string]any{"mtls": map[string]any{"mode": "STRICT"},
					"portLevelMtls": map[string]any{"8080": map[string]any{"mode": "DISABLE"}}}),
				peerAuthn("shop", "web", "", workloadSpec("", map[string]any{"app": "web"}, map[string]any{
					"0": map[string]any{"mode": "DISABLE"}})),
			},
			want:     PeerAuthn{Mode: MTLSStrict},
			wantSvc:  MTLSStrict,
			problems: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := NewStore()
			recs := []rec{add("c1", service(tc.ns, "web", "10.0.0.1", svcPort{name: "http", port: 80}))}
			for _, o := range tc.objs {
				recs = append(recs, add("c1", o))
			}
			applyAll(t, s, recs...)
			m := s.Snapshot()
			if diff := cmp.Diff(tc.want, m.PeerAuthentication(tc.ns, tc.labels)); diff != "" {
				t.Errorf("PeerAuthentication (-want +got):\n%s", diff)
			}
			if got := m.ServiceFor(tc.ns, "web").MTLSMode(); got != tc.wantSvc {
				t.Errorf("service mode %v, want %v", got, tc.wantSvc)
			}
			if got := len(m.Problems()); got != tc.problems {
				t.Errorf("%d problems, want %d: %v", got, tc.problems, m.Problems())
			}
			// The scoped mesh answers the same.
			if diff := cmp.Diff(tc.want, m.ScopeForProxy(tc.ns, tc.labels).PeerAuthentication(tc.ns, tc.labels)); diff != "" {
				t.Errorf("scoped PeerAuthentication (-want +got):\n%s", diff)
			}
		})
	}
}

// TestPeerAuthenticationChanges: adding, changing and deleting a policy
// makes a new service version with the new mode (so that clusters built
// from it follow), and a change elsewhere keeps the service.
func TestPeerAuthenticationChanges(t *testing.T) {
	s := NewStore()
	applyAll(t, s, add("c1", service("shop", "web", "10.0.0.1", svcPort{name: "http", port: 80})))
	m0 := s.Snapshot()
	applyAll(t, s, add("c1", peerAuthn("shop", "ns", "", mtlsSpec("DISABLE"))))
	m1 := s.Snapshot()
	if got := m1.ServiceFor("shop", "web").MTLSMode(); got != MTLSDisable {
		t.Fatalf("mode %v after DISABLE", got)
	}
	if m1.ServiceFor("shop", "web") == m0.ServiceFor("shop", "web") {
		t.Error("the service kept its version across a mode change")
	}
	applyAll(t, s, add("c1", peerAuthn("other", "ns", "", mtlsSpec("STRICT"))))
	m2 := s.Snapshot()
	if m2.ServiceFor("shop", "web") != m1.ServiceFor("shop", "web") {
		t.Error("a policy of another namespace rebuilt the service")
	}
	if m2.PeerAuthentication("other", nil).Mode != MTLSStrict {
		t.Error("the other namespace's policy is not applied")
	}
	applyAll(t, s, del("c1", peerAuthn("shop", "ns", "", nil)))
	if got := s.Snapshot().ServiceFor("shop", "web").MTLSMode(); got != MTLSPermissive {
		t.Errorf("mode %v after delete, want PERMISSIVE", got)
	}
	// A record that does not decode is reported; the previous version stays.
	bad := add("c1", peerAuthn("shop", "ns", "", nil))
	bad.raw = []byte(`{"metadata":{"name":"ns","namespace":"shop"},"spec":{"mtls":"STRICT"}}`)
	if err := s.Apply(bad.proto(t), s.AppliedSeq()+1); err == nil {
		t.Fatal("an mtls that is not an object decoded")
	}
	if got := len(s.Snapshot().Problems()); got != 1 {
		t.Errorf("%d problems after an undecodable record, want 1", got)
	}
}

// TestServiceAccounts: a service's identities are its endpoints' service
// accounts (a Pod's spec.serviceAccountName) as SPIFFE identities under
// the mesh's trust domain, sorted and unique; a pod's service account
// change is a new config version of the service; AllSidecars says whether
// every endpoint of a port has tlsMode istio.
func TestServiceAccounts(t *testing.T) {
	mc, err := meshconfig.Parse([]byte("trustDomain: example.org\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := NewStore(WithMeshConfig(mc))
	pod := func(name, sa string, tls bool) *unstructuredObj {
		labels := map[string]any{"app": "web"}
		if tls {
			labels[TLSModeLabel] = "istio"
		}
		o := podObj("shop", name, labels)
		o.body["spec"] = map[string]any{"serviceAccountName": sa}
		return o
	}
	applyAll(t, s,
		add("c1", service("shop", "web", "10.0.0.1", svcPort{name: "http", port: 80})),
		add("c1", pod("web-1", "web", true)),
		add("c1", pod("web-2", "web", true)),
		add("c1", pod("web-3", "admin", true)),
		add("c1", podSlice("shop", "web-abc", "web", ep{addr: "10.1.0.1", node: "web-1"}, ep{addr: "10.1.0.2", node: "web-2"}, ep{addr: "10.1.0.3", node: "web-3"})),
	)
	m1 := s.Snapshot()
	svc := m1.ServiceFor("shop", "web")
	want := []string{"spiffe://example.org/ns/shop/sa/admin", "spiffe://example.org/ns/shop/sa/web"}
	if diff := cmp.Diff(want, svc.ServiceAccounts); diff != "" {
		t.Errorf("ServiceAccounts (-want +got):\n%s", diff)
	}
	if got := svc.Port(80).Endpoints[0].ServiceAccount; got != "web" {
		t.Errorf("endpoint service account %q, want web", got)
	}
	if !svc.AllSidecars(80) {
		t.Error("AllSidecars(80) false with every endpoint tlsMode istio")
	}
	applyAll(t, s, upd("c1", pod("web-3", "web", false)))
	m2 := s.Snapshot()
	svc2 := m2.ServiceFor("shop", "web")
	if diff := cmp.Diff([]string{"spiffe://example.org/ns/shop/sa/web"}, svc2.ServiceAccounts); diff != "" {
		t.Errorf("ServiceAccounts after the change (-want +got):\n%s", diff)
	}
	if svc2.AllSidecars(80) {
		t.Error("AllSidecars(80) true with an endpoint without sidecar")
	}
	if svc2.config == svc.config {
		t.Error("a service account change kept the config memo")
	}
}
