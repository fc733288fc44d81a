package ads

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"testing"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	resource "github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/pilotwire/pilotwire/internal/testkit/testutil"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

func getJSON(t testing.TB, url string, v any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v: %s", url, err, b)
		}
	}
	return resp.StatusCode
}

// TestDebugEndpoints: syncz shows sent and acked versions per proxy,
// config_dump what the proxy would get, configz the model.
func TestDebugEndpoints(t *testing.T) {
	f := startFrontend(t, func(f *frontend) {
		f.publish(t, pb.Op_OP_ADD, "", "Service", service("default", "a", 80))
		f.publish(t, pb.Op_OP_ADD, "discovery.k8s.io", "EndpointSlice", slice("default", "a", 8080, "10.1.0.1"))
	})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	c := dial(ctx, t, f.addr, sidecar())
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
	cds := c.recv()
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, VersionInfo: cds.VersionInfo, ResponseNonce: cds.Nonce})

	var rows []syncStatus
	testutil.Eventually(t, "syncz shows the ACK", func() bool {
		rows = nil
		getJSON(t, f.http+"/debug/syncz", &rows)
		return len(rows) == 1 && rows[0].ClusterAcked == cds.VersionInfo
	})
	if rows[0].ProxyID != sidecar().Id || rows[0].ClusterSent != cds.VersionInfo || rows[0].ProxyType != "sidecar" {
		t.Errorf("syncz row = %+v", rows[0])
	}
	if ts := rows[0].Types["cds"]; ts.Nonce != cds.Nonce || ts.SentAt.IsZero() || ts.AckedAt.Before(ts.SentAt) {
		t.Errorf("syncz cds = %+v, want nonce %s, sent and then acked", ts, cds.Nonce)
	}

	var dump map[string]json.RawMessage
	if code := getJSON(t, f.http+"/debug/config_dump?proxyID="+sidecar().Id, &dump); code != http.StatusOK {
		t.Fatalf("config_dump status %d", code)
	}
	var cdsDump struct {
		Version   string            `json:"version"`
		Resources []json.RawMessage `json:"resources"`
	}
	if err := json.Unmarshal(dump["cds"], &cdsDump); err != nil {
		t.Fatal(err)
	}
	if cdsDump.Version != cds.VersionInfo || len(cdsDump.Resources) != 4 { // a's cluster, passthrough and blackhole
		t.Errorf("config_dump cds = version %s with %d resources, want %s with 4", cdsDump.Version, len(cdsDump.Resources), cds.VersionInfo)
	}
	if code := getJSON(t, f.http+"/debug/config_dump?proxyID=nobody", &dump); code != http.StatusNotFound {
		t.Errorf("config_dump for an unknown proxy: status %d, want 404", code)
	}

	var cz struct {
		Seq      uint64 `json:"seq"`
		Services []struct {
			Hostname string `json:"hostname"`
			Ports    []struct {
				Endpoints []string `json:"endpoints"`
			} `json:"ports"`
		} `json:"services"`
	}
	getJSON(t, f.http+"/debug/configz", &cz)
	if len(cz.Services) != 1 || cz.Services[0].Hostname != "a.default.svc.cluster.local" || cz.Services[0].Ports[0].Endpoints[0] != "10.1.0.1:8080@c1" {
		t.Errorf("configz = %+v", cz)
	}
}

// TestConfigDumpMatchesWhatThePodGets: for a sidecar on a pod that backs a
// service, config_dump shows what the proxy is sent, inbound side
// included (the pod IP comes from the node id).
func TestConfigDumpMatchesWhatThePodGets(t *testing.T) {
	f := startFrontend(t, func(f *frontend) {
		f.publish(t, pb.Op_OP_ADD, "", "Service", service("default", "a", 80))
		f.publish(t, pb.Op_OP_ADD, "discovery.k8s.io", "EndpointSlice", slice("default", "a", 8080, "10.1.0.1"))
	})
	ctx, cancel := context.WithTimeout(context.Background(), testutil.DefaultTimeout)
	defer cancel()
	node := &core.Node{Id: "sidecar~10.1.0.1~a-0.default~default.svc.cluster.local"}
	c := dial(ctx, t, f.addr, node)
	c.send(&discovery.DiscoveryRequest{TypeUrl: resource.ClusterType})
	cds := c.recv()
	if !slices.Contains(names(cds), "inbound|8080||") {
		t.Fatalf("CDS %v lacks the pod's inbound cluster", names(cds))
	}
	// The connection's view is published when the stream opens and again
	// once it watches CDS; config_dump shows what the view watches.
	var dump map[string]json.RawMessage
	testutil.Eventually(t, "the connection published with its CDS watch", func() bool {
		dump = nil
		if code := getJSON(t, f.http+"/debug/config_dump?proxyID="+node.Id, &dump); code != http.StatusOK && code != http.StatusNotFound {
			t.Fatalf("config_dump status %d", code)
		}
		return dump["cds"] != nil
	})
	var cdsDump struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(dump["cds"], &cdsDump); err != nil {
		t.Fatal(err)
	}
	if cdsDump.Version != cds.VersionInfo {
		t.Errorf("config_dump cds version %s, want the version the proxy was sent, %s", cdsDump.Version, cds.VersionInfo)
	}
}
