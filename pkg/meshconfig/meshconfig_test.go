package meshconfig_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	meshv1alpha1 "istio.io/api/mesh/v1alpha1"

	"github.com/pilotwire/pilotwire/pkg/meshconfig"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		want    meshconfig.Mode
		wantErr bool
	}{
		{name: "empty file: Istio's default", yaml: "", want: meshconfig.AllowAny},
		{name: "registry only", yaml: "outboundTrafficPolicy:\n  mode: REGISTRY_ONLY\n", want: meshconfig.RegistryOnly},
		{name: "allow any", yaml: "outboundTrafficPolicy: {mode: ALLOW_ANY}\n", want: meshconfig.AllowAny},
		{name: "other MeshConfig fields are ignored", yaml: "accessLogFile: /dev/stdout\ndefaultConfig:\n  holdApplicationUntilProxyStarts: true\noutboundTrafficPolicy:\n  mode: REGISTRY_ONLY\n", want: meshconfig.RegistryOnly},
		{name: "unknown mode", yaml: "outboundTrafficPolicy: {mode: SOMETIMES}\n", wantErr: true},
		{name: "not YAML", yaml: "outboundTrafficPolicy: [", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := meshconfig.Parse([]byte(tc.yaml))
			if tc.wantErr {
				if err == nil {
					t.Fatalf("Parse accepted %q", tc.yaml)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.OutboundMode(); got != tc.want {
				t.Errorf("mode %s, want %s", got, tc.want)
			}
		})
	}
}

func TestLoad(t *testing.T) {
	c, err := meshconfig.Load("")
	if err != nil || c.OutboundMode() != meshconfig.AllowAny {
		t.Fatalf("Load(\"\") = %v, %v; want the default", c, err)
	}
	path := filepath.Join(t.TempDir(), "mesh")
	if err := os.WriteFile(path, []byte("outboundTrafficPolicy:\n  mode: REGISTRY_ONLY\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, err := meshconfig.Load(path); err != nil || c.OutboundMode() != meshconfig.RegistryOnly {
		t.Fatalf("Load(%s) = %v, %v", path, c, err)
	}
	if _, err := meshconfig.Load(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("Load of a missing file succeeded")
	}
}

func TestParseFields(t *testing.T) {
	c, err := meshconfig.Parse([]byte("rootNamespace: istio-config\ndefaultServiceExportTo: [\".\"]\noutboundTrafficPolicy: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.RootNamespace(); got != "istio-config" {
		t.Errorf("root namespace %q", got)
	}
	if got := c.DefaultServiceExportTo(); len(got) != 1 || got[0] != "." {
		t.Errorf("default service exportTo %q", got)
	}
	if got := c.DefaultDestinationRuleExportTo(); len(got) != 1 || got[0] != "*" {
		t.Errorf("default destination rule exportTo %q", got)
	}
	if got := c.OutboundMode(); got != meshconfig.AllowAny {
		t.Errorf("an outboundTrafficPolicy without mode gives %s, want the default", got)
	}
	d := meshconfig.Default()
	if d.RootNamespace() != meshconfig.DefaultRootNamespace || d.OutboundMode() != meshconfig.AllowAny {
		t.Errorf("defaults: %q %s", d.RootNamespace(), d.OutboundMode())
	}
	var nilCfg *meshconfig.MeshConfig
	if nilCfg.RootNamespace() != meshconfig.DefaultRootNamespace || nilCfg.OutboundMode() != meshconfig.AllowAny {
		t.Error("nil mesh config is not the default")
	}
}

func TestLocalityLbSetting(t *testing.T) {
	tests := []struct {
		name         string
		yaml         string
		enabled      bool
		distribute   int
		failoverFrom string
	}{
		{name: "Istio's default: enabled", yaml: "", enabled: true},
		{name: "disabled stays disabled", yaml: "localityLbSetting: {enabled: false}\n", enabled: false},
		{name: "a setting replaces the default whole", yaml: "localityLbSetting:\n  failover: [{from: us-east, to: eu-west}]\n", failoverFrom: "us-east"},
		{name: "distribute", yaml: "localityLbSetting:\n  enabled: true\n  distribute: [{from: \"*\", to: {\"us-east/*\": 100}}]\n", enabled: true, distribute: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := meshconfig.Parse([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			s := c.LocalityLbSetting()
			if s == nil {
				t.Fatal("no localityLbSetting")
			}
			if got := s.GetEnabled().GetValue(); got != tc.enabled {
				t.Errorf("enabled %v, want %v", got, tc.enabled)
			}
			if got := len(s.GetDistribute()); got != tc.distribute {
				t.Errorf("%d distribute entries, want %d", got, tc.distribute)
			}
			if got := s.GetFailover(); tc.failoverFrom != "" && (len(got) != 1 || got[0].GetFrom() != tc.failoverFrom) {
				t.Errorf("failover %v, want one from %s", got, tc.failoverFrom)
			}
		})
	}
}

func TestDNSRefreshRate(t *testing.T) {
	tests := []struct {
		name string
		cfg  func(t *testing.T) *meshconfig.MeshConfig
		want time.Duration
	}{
		{name: "Istio's default", cfg: parse(""), want: time.Minute},
		{name: "set", cfg: parse("dnsRefreshRate: 5s\n"), want: 5 * time.Second},
		{name: "under a second replaces the default whole", cfg: parse("dnsRefreshRate: 0.5s\n"), want: 500 * time.Millisecond},
		{name: "a config made by New without it", cfg: func(*testing.T) *meshconfig.MeshConfig { return meshconfig.New(&meshv1alpha1.MeshConfig{}) }, want: time.Minute},
		{name: "nil", cfg: func(*testing.T) *meshconfig.MeshConfig { return nil }, want: time.Minute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.cfg(t).DNSRefreshRate(); got != tc.want {
				t.Errorf("DNSRefreshRate() = %v, want %v", got, tc.want)
			}
		})
	}
}

func parse(yaml string) func(t *testing.T) *meshconfig.MeshConfig {
	return func(t *testing.T) *meshconfig.MeshConfig {
		t.Helper()
		c, err := meshconfig.Parse([]byte(yaml))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
}

// TestAutoMTLSAndTrustDomain: enableAutoMtls is on and the trust domain is
// cluster.local unless the file says otherwise, as in Istio; a config made
// by New without them reads the same defaults.
func TestAutoMTLSAndTrustDomain(t *testing.T) {
	tests := []struct {
		name     string
		yaml     string
		wantAuto bool
		wantTD   string
	}{
		{name: "defaults", yaml: "", wantAuto: true, wantTD: "cluster.local"},
		{name: "auto mTLS off", yaml: "enableAutoMtls: false\n", wantAuto: false, wantTD: "cluster.local"},
		{name: "trust domain", yaml: "trustDomain: example.org\n", wantAuto: true, wantTD: "example.org"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := meshconfig.Parse([]byte(tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.AutoMTLS(); got != tc.wantAuto {
				t.Errorf("AutoMTLS() = %v, want %v", got, tc.wantAuto)
			}
			if got := c.TrustDomain(); got != tc.wantTD {
				t.Errorf("TrustDomain() = %q, want %q", got, tc.wantTD)
			}
		})
	}
	var unset *meshconfig.MeshConfig
	if !unset.AutoMTLS() || unset.TrustDomain() != "cluster.local" {
		t.Errorf("nil config: AutoMTLS %v, TrustDomain %q", unset.AutoMTLS(), unset.TrustDomain())
	}
}
