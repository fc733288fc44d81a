package ads

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admin "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	csds "github.com/envoyproxy/go-control-plane/envoy/service/status/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

// tlsFrontend is a frontend with mutual TLS and the SPIFFE identity check,
// and the CA its clients' certificates come from.
type tlsFrontend struct {
	*frontend
	ca     *testCA
	pool   *x509.CertPool
	serial int64
}

func startTLSFrontend(t *testing.T, pre func(*frontend)) *tlsFrontend {
	t.Helper()
	ca := newCA(t)
	dir := t.TempDir()
	certFile, keyFile := writePair(t, dir, ca.issue(t, 2, "", true))
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.pem, 0o600); err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	f := startFrontendTuned(t, pre, func(c *Config) {
		c.TLSCert, c.TLSKey, c.ClientCA, c.TrustDomain = certFile, keyFile, caFile, "cluster.local"
	})
	return &tlsFrontend{frontend: f, ca: ca, pool: pool, serial: 10}
}

// dial opens an ADS stream with a client certificate for namespace ns.
func (f *tlsFrontend) dial(ctx context.Context, t *testing.T, ns string, node *core.Node) *client {
	t.Helper()
	f.serial++
	tc := &tls.Config{RootCAs: f.pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{f.ca.issue(t, f.serial, "spiffe://cluster.local/ns/"+ns+"/sa/default", false)}}
	cc, err := grpc.NewClient(f.addr, grpc.WithTransportCredentials(credentials.NewTLS(tc)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	s, err := discovery.NewAggregatedDiscoveryServiceClient(cc).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &client{t: t, stream: s, node: node, cc: cc}
}

// istioctlNode is the node istioctl's xDS client sends: GENERATOR=event,
// no proxy config.
func istioctlNode(t *testing.T, ns string) *core.Node {
	t.Helper()
	md, err := structpb.NewStruct(map[string]any{"GENERATOR": "event", "NAMESPACE": ns, "SERVICE_ACCOUNT": "istiod"})
	if err != nil {
		t.Fatal(err)
	}
	return &core.Node{Id: "sidecar~127.0.0.1~istioctl." + ns + "~" + ns + ".svc.cluster.local", Metadata: md}
}

// debugRequest is the request istioctl sends: its xDS client fills the
// response nonce with the time, which is no nonce of this stream.
func debugRequest(typeURL string, names ...string) *discovery.DiscoveryRequest {
	return &discovery.DiscoveryRequest{TypeUrl: typeURL, ResourceNames: names, ResponseNonce: time.Now().String()}
}

// syncedSidecar connects a sidecar in namespace default, takes its
// clusters and ACKs them; it returns the CDS response.
func syncedSidecar(ctx context.Context, t *testing.T, f *tlsFrontend) *discovery.DiscoveryResponse {
	t.Helper()
	md, _ := structpb.NewStruct(map[string]any{"ISTIO_VERSION": "1.99.0", "CLUSTER_ID": "c1"})
	c := f.dial(ctx, t, "default", &core.Node{Id: sidecar().Id, Metadata: md})
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
	cds := c.recv()
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: cds.VersionInfo, ResponseNonce: cds.Nonce})
	var rows []syncStatus
	testutil.Eventually(t, "syncz shows the sidecar's ACK", func() bool {
		rows = nil
		getJSON(t, f.http+"/debug/syncz", &rows)
		return len(rows) == 1 && rows[0].ClusterAcked == cds.VersionInfo
	})
	return cds
}

// clientConfigs decodes a syncz response.
func clientConfigs(t *testing.T, r *discovery.DiscoveryResponse) []*csds.ClientConfig {
	t.Helper()
	var out []*csds.ClientConfig
	for _, a := range r.GetResources() {
		cc := &csds.ClientConfig{}
		if err := a.UnmarshalTo(cc); err != nil {
			t.Fatalf("syncz resource %s: %v", a.GetTypeUrl(), err)
		}
		out = append(out, cc)
	}
	return out
}

// TestDebugSynczOverADS: istioctl proxy-status and version ask a control
// plane for istio.io/debug/syncz on an ADS stream of their own. A caller
// from the root namespace is answered with a ClientConfig per connected
// proxy, each xDS type's status as Istio reports it, and the control
// plane's identity; the caller's stream is no proxy and stays usable.
func TestDebugSynczOverADS(t *testing.T) {
	f := startTLSFrontend(t, func(f *frontend) {
		f.publish(t, pb.Op_OP_ADD, "", "Service", service("default", "a", 80))
	})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	cds := syncedSidecar(ctx, t, f)

	ctl := f.dial(ctx, t, "istio-system", istioctlNode(t, "istio-system"))
	ctl.send(debugRequest("istio.io/debug/syncz"))
	r := ctl.recv()
	if r.GetTypeUrl() != "istio.io/debug/syncz" {
		t.Fatalf("response type %q, want istio.io/debug/syncz", r.GetTypeUrl())
	}
	var cp struct {
		Component string
		ID        string
		Info      struct {
			Version string `json:"version"`
		}
	}
	if err := json.Unmarshal([]byte(r.GetControlPlane().GetIdentifier()), &cp); err != nil {
		t.Fatalf("control_plane identifier %q: %v", r.GetControlPlane().GetIdentifier(), err)
	}
	if cp.ID != f.id || cp.Component == "" || cp.Info.Version == "" {
		t.Errorf("control plane = %+v, want ID %s, a component and a version", cp, f.id)
	}
	got := clientConfigs(t, r)
	if len(got) != 1 {
		t.Fatalf("syncz has %d client configs, want 1 (the sidecar; not the caller)", len(got))
	}
	cc := got[0]
	md := cc.GetNode().GetMetadata().GetFields()
	if cc.GetNode().GetId() != sidecar().Id || md["NAMESPACE"].GetStringValue() != "default" ||
		md["CLUSTER_ID"].GetStringValue() != "c1" || md["ISTIO_VERSION"].GetStringValue() != "1.99.0" {
		t.Errorf("node = %v, want %s in default, cluster c1, version 1.99.0", cc.GetNode(), sidecar().Id)
	}
	type typeStatus struct {
		Type, Version string
		Status        csds.ConfigStatus
		Updated       bool
	}
	var types []typeStatus
	for _, x := range cc.GetGenericXdsConfigs() {
		types = append(types, typeStatus{Type: x.GetTypeUrl(), Version: x.GetVersionInfo(), Status: x.GetConfigStatus(), Updated: x.GetLastUpdated() != nil})
	}
	want := []typeStatus{{Type: resource.ClusterType, Version: cds.VersionInfo, Status: csds.ConfigStatus_SYNCED, Updated: true}}
	if diff := cmp.Diff(want, types); diff != "" {
		t.Errorf("generic_xds_configs (-want +got):\n%s", diff)
	}

	// The stream stays open: the names filter proxies, and the same
	// request again is answered again.
	ctl.send(debugRequest("istio.io/debug/syncz", "nobody.default"))
	if n := len(clientConfigs(t, ctl.recv())); n != 0 {
		t.Errorf("syncz for nobody.default has %d client configs, want 0", n)
	}
	ctl.send(debugRequest("istio.io/debug/syncz", "a-0.default"))
	if n := len(clientConfigs(t, ctl.recv())); n != 1 {
		t.Errorf("syncz for a-0.default has %d client configs, want 1", n)
	}
	var rows []syncStatus
	getJSON(t, f.http+"/debug/syncz", &rows)
	if len(rows) != 1 {
		t.Errorf("/debug/syncz lists %d connections, want 1: a debug stream is no proxy", len(rows))
	}
	if got := f.gauge(`pilotwire_ads_debug_requests_total{type="syncz"}`); got != 3 {
		t.Errorf("debug requests counted = %v, want 3", got)
	}
}

// TestDebugConfigDumpOverADS: istio.io/debug/config_dump names one proxy
// (istioctl sends <pod>.<namespace>) and is answered with the sections of
// an Envoy config dump of what the proxy is sent.
func TestDebugConfigDumpOverADS(t *testing.T) {
	f := startTLSFrontend(t, func(f *frontend) {
		f.publish(t, pb.Op_OP_ADD, "", "Service", service("default", "a", 80))
	})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	cds := syncedSidecar(ctx, t, f)

	ctl := f.dial(ctx, t, "istio-system", istioctlNode(t, "istio-system"))
	for _, name := range []string{"a-0.default", sidecar().Id} {
		ctl.send(debugRequest("istio.io/debug/config_dump", name))
		r := ctl.recv()
		var types []string
		var clusters []string
		for _, a := range r.GetResources() {
			types = append(types, a.GetTypeUrl())
			if a.GetTypeUrl() != resource.APITypePrefix+"envoy.admin.v3.ClustersConfigDump" {
				continue
			}
			d := &admin.ClustersConfigDump{}
			if err := a.UnmarshalTo(d); err != nil {
				t.Fatal(err)
			}
			if d.GetVersionInfo() != cds.VersionInfo {
				t.Errorf("%s: clusters version %s, want %s", name, d.GetVersionInfo(), cds.VersionInfo)
			}
			for _, dc := range d.GetDynamicActiveClusters() {
				c := &cluster.Cluster{}
				if err := dc.GetCluster().UnmarshalTo(c); err != nil {
					t.Fatal(err)
				}
				if err := c.ValidateAll(); err != nil {
					t.Errorf("cluster %s: %v", c.GetName(), err)
				}
				clusters = append(clusters, c.GetName())
			}
		}
		wantTypes := []string{"BootstrapConfigDump", "ClustersConfigDump", "ListenersConfigDump", "ScopedRoutesConfigDump", "RoutesConfigDump", "SecretsConfigDump", "EcdsConfigDump"}
		for i, w := range wantTypes {
			wantTypes[i] = resource.APITypePrefix + "envoy.admin.v3." + w
		}
		if diff := cmp.Diff(wantTypes, types); diff != "" {
			t.Errorf("%s: config dump sections (-want +got):\n%s", name, diff)
		}
		if diff := cmp.Diff(names(cds), clusters); diff != "" {
			t.Errorf("%s: dumped clusters (-sent +dumped):\n%s", name, diff)
		}
	}
	// A proxy not on this frontend: an empty answer, as Istio gives (the
	// proxy may be on another frontend); the stream stays open.
	ctl.send(debugRequest("istio.io/debug/config_dump", "nobody.default"))
	if r := ctl.recv(); len(r.GetResources()) != 0 {
		t.Errorf("config_dump for an unknown proxy has %d resources, want 0", len(r.GetResources()))
	}
}

// TestDebugGenericOverADS: istio.io/debug runs one debug endpoint, named
// by the only resource name, and answers with its output.
func TestDebugGenericOverADS(t *testing.T) {
	f := startTLSFrontend(t, func(f *frontend) {
		f.publish(t, pb.Op_OP_ADD, "", "Service", service("default", "a", 80))
	})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	syncedSidecar(ctx, t, f)
	ctl := f.dial(ctx, t, "istio-system", istioctlNode(t, "istio-system"))
	ctl.send(debugRequest("istio.io/debug", "syncz"))
	r := ctl.recv()
	if len(r.GetResources()) != 1 || r.GetResources()[0].GetTypeUrl() != "istio.io/debug" {
		t.Fatalf("istio.io/debug syncz = %v, want one istio.io/debug resource", r.GetResources())
	}
	var rows []syncStatus
	if err := json.Unmarshal(r.GetResources()[0].GetValue(), &rows); err != nil {
		t.Fatalf("syncz output: %v: %s", err, r.GetResources()[0].GetValue())
	}
	if len(rows) != 1 || rows[0].ProxyID != sidecar().Id {
		t.Errorf("syncz output = %+v, want the sidecar's row", rows)
	}
	// Not exactly one name: the caller's stream ends with InvalidArgument,
	// as with Istio.
	ctl.send(debugRequest("istio.io/debug"))
	if _, err := ctl.stream.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("istio.io/debug without a name: %v, want InvalidArgument", err)
	}
}

// TestDebugOverADSNamespaceScoped: a caller from another namespace than
// the root sees only its own namespace's proxies, as with Istio, and may
// run only config_dump through istio.io/debug.
func TestDebugOverADSNamespaceScoped(t *testing.T) {
	f := startTLSFrontend(t, func(f *frontend) {
		f.publish(t, pb.Op_OP_ADD, "", "Service", service("default", "a", 80))
	})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	syncedSidecar(ctx, t, f)
	tests := []struct {
		name     string
		ns       string
		typeURL  string
		names    []string
		want     int // resources in the answer
		wantCode codes.Code
	}{
		{name: "own namespace syncz", ns: "default", typeURL: "istio.io/debug/syncz", want: 1},
		{name: "other namespace syncz", ns: "other", typeURL: "istio.io/debug/syncz", want: 0},
		{name: "own namespace config_dump", ns: "default", typeURL: "istio.io/debug/config_dump", names: []string{"a-0.default"}, want: 7},
		{name: "other namespace config_dump", ns: "other", typeURL: "istio.io/debug/config_dump", names: []string{"a-0.default"}, want: 0},
		{name: "other namespace generic config_dump", ns: "other", typeURL: "istio.io/debug", names: []string{"config_dump?proxyID=a-0.default"}, want: 1},
		{name: "other namespace generic syncz", ns: "other", typeURL: "istio.io/debug", names: []string{"syncz"}, wantCode: codes.PermissionDenied},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctl := f.dial(ctx, t, tc.ns, istioctlNode(t, tc.ns))
			ctl.send(debugRequest(tc.typeURL, tc.names...))
			r, err := ctl.stream.Recv()
			if status.Code(err) != tc.wantCode {
				t.Fatalf("Recv() = %v, want %v", err, tc.wantCode)
			}
			if err == nil && len(r.GetResources()) != tc.want {
				t.Errorf("%d resources, want %d", len(r.GetResources()), tc.want)
			}
			if tc.typeURL == "istio.io/debug" && err == nil && len(r.GetResources()) == 1 {
				if v := string(r.GetResources()[0].GetValue()); !strings.HasPrefix(v, "no connection for proxyID a-0.default") {
					t.Errorf("config_dump of another namespace's proxy through istio.io/debug = %.200q, want the not-found answer", v)
				}
			}
		})
	}
}

// TestDebugOverADSNeedsAuthentication: on a stream without a verified
// identity (plaintext), debug requests end the caller's stream with
// Unauthenticated, as Istio's default ENABLE_DEBUG_ENDPOINT_AUTH does;
// without that check they are answered, on state-of-the-world and delta
// streams alike.
func TestDebugOverADSNeedsAuthentication(t *testing.T) {
	t.Run("plaintext refused", func(t *testing.T) {
		f := startFrontend(t, nil)
		ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
		defer cancel()
		ctl := dial(ctx, t, f.addr, istioctlNode(t, "istio-system"))
		ctl.send(debugRequest("istio.io/debug/syncz"))
		if _, err := ctl.stream.Recv(); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("syncz on plaintext: %v, want Unauthenticated", err)
		}
	})
	t.Run("auth off", func(t *testing.T) {
		f := startFrontendTuned(t, func(f *frontend) {
			f.publish(t, pb.Op_OP_ADD, "", "Service", service("default", "a", 80))
		}, func(c *Config) { c.DisableDebugEndpointAuth = true })
		ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
		defer cancel()
		proxy := dial(ctx, t, f.addr, sidecar())
		proxy.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
		cds := proxy.recv()

		ctl := dial(ctx, t, f.addr, istioctlNode(t, "istio-system"))
		ctl.send(debugRequest("istio.io/debug/syncz"))
		got := clientConfigs(t, ctl.recv())
		if len(got) != 1 || len(got[0].GetGenericXdsConfigs()) != 1 || got[0].GetGenericXdsConfigs()[0].GetConfigStatus() != csds.ConfigStatus_STALE {
			t.Errorf("syncz = %v, want the sidecar with CDS sent and not ACKed (STALE)", got)
		}
		// The proxy's own stream may ask too, and goes on being served.
		proxy.send(debugRequest("istio.io/debug/syncz"))
		if r := proxy.recv(); r.GetTypeUrl() != "istio.io/debug/syncz" || len(r.GetResources()) != 1 {
			t.Errorf("syncz on the proxy's stream = %s with %d resources", r.GetTypeUrl(), len(r.GetResources()))
		}
		proxy.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: cds.VersionInfo, ResponseNonce: cds.Nonce})
		proxy.send(&discovery.DiscoveryRequest{TypeUrl: resource.ListenerType})
		lds := proxy.recv()
		if lds.GetTypeUrl() != resource.ListenerType {
			t.Fatalf("after the debug request the proxy got %s, want its listeners", lds.GetTypeUrl())
		}
		proxy.send(&discovery.DiscoveryRequest{TypeUrl: resource.ListenerType, VersionInfo: lds.VersionInfo, ResponseNonce: lds.Nonce})

		d := dialDelta(ctx, t, f.addr)
		if err := d.stream.Send(&discovery.DeltaDiscoveryRequest{Node: istioctlNode(t, "istio-system"), TypeUrl: "istio.io/debug/syncz"}); err != nil {
			t.Fatal(err)
		}
		dr, err := d.stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if dr.GetTypeUrl() != "istio.io/debug/syncz" || len(dr.GetResources()) != 1 || dr.GetResources()[0].GetName() != sidecar().Id {
			t.Errorf("delta syncz = %v, want the sidecar's ClientConfig named by its node id", dr)
		}

		// An unknown debug type: the caller's stream ends with a clear
		// InvalidArgument; the proxy's goes on.
		bad := dial(ctx, t, f.addr, istioctlNode(t, "istio-system"))
		bad.send(debugRequest("istio.io/debug/bogus"))
		if _, err := bad.stream.Recv(); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("istio.io/debug/bogus: %v, want InvalidArgument", err)
		}
		proxy.send(&discovery.DiscoveryRequest{TypeUrl: resource.RouteType, ResourceNames: []string{"80"}})
		if r := proxy.recv(); r.GetTypeUrl() != resource.RouteType {
			t.Errorf("after another stream's bogus debug request the proxy got %s, want its routes", r.GetTypeUrl())
		}
		if got, want := f.gauge(`pilotwire_ads_debug_requests_total{type="unknown"}`), 1.0; got != want {
			t.Errorf("unknown debug requests counted %v, want %v", got, want)
		}
	})
}

// TestDebugEndpointAuthFlag: --debug-endpoint-auth defaults to true (the
// zero Config), and false turns the check off.
func TestDebugEndpointAuthFlag(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantOff bool
	}{
		{name: "default", args: nil, wantOff: false},
		{name: "bare flag", args: []string{"--debug-endpoint-auth"}, wantOff: false},
		{name: "false", args: []string{"--debug-endpoint-auth=false"}, wantOff: true},
		{name: "true", args: []string{"--debug-endpoint-auth=true"}, wantOff: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c Config
			fs := pflag.NewFlagSet("ads", pflag.ContinueOnError)
			c.AddFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			if c.DisableDebugEndpointAuth != tc.wantOff {
				t.Errorf("DisableDebugEndpointAuth = %v, want %v", c.DisableDebugEndpointAuth, tc.wantOff)
			}
		})
	}
}
