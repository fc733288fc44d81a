// Package meshconfig reads the mesh-wide settings pilotwire shares with
// Istio: a file in the YAML (or JSON) shape of Istio's MeshConfig
// (istio.io/api mesh/v1alpha1), for instance
//
//	rootNamespace: istio-config
//	outboundTrafficPolicy:
//	  mode: REGISTRY_ONLY
//	defaultServiceExportTo: ["."]
//
// The file is merged onto Istio's defaults, as istiod does, so fields it
// leaves out keep their default. Every MeshConfig field is accepted; the
// ones pilotwire acts on are read through the accessors below. Fields of
// newer Istio versions are ignored rather than rejected.
package meshconfig

import (
	"fmt"
	"os"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	networkingv1alpha3 "istio.io/api/networking/v1alpha3"
	"sigs.k8s.io/yaml"

	"github.com/pilotwire/pilotwire/pkg/spiffe"
)

// Mode is MeshConfig.outboundTrafficPolicy.mode.
type Mode string

// Outbound traffic policy modes, as in Istio.
const (
	// AllowAny passes traffic to unknown destinations through
	// (PassthroughCluster). Istio's default.
	AllowAny Mode = "ALLOW_ANY"
	// RegistryOnly blocks traffic to destinations outside the service
	// registry (BlackHoleCluster, or a 502 for HTTP).
	RegistryOnly Mode = "REGISTRY_ONLY"
)

// Istio's defaults for the fields pilotwire reads (istio's
// pkg/config/mesh DefaultMeshConfig).
const (
	// DefaultRootNamespace is where mesh-wide config (a default Sidecar,
	// DestinationRules for every namespace) lives.
	DefaultRootNamespace = "istio-system"
	// DefaultDNSRefreshRate is how often Envoy resolves the names of DNS
	// clusters again after a lookup failed (a successful one follows the
	// records' TTL).
	DefaultDNSRefreshRate = 60 * time.Second
	// DefaultTrustDomain is the trust domain of workload identities
	// (spiffe://<trust domain>/ns/<namespace>/sa/<service account>).
	DefaultTrustDomain = spiffe.DefaultTrustDomain
)

// MeshConfig is Istio's MeshConfig. The zero value and nil are the default
// mesh config. A MeshConfig is read-only once made.
type MeshConfig struct {
	proto *meshv1alpha1.MeshConfig // nil: the defaults
}

// defaults returns Istio's default MeshConfig for the fields pilotwire reads.
func defaults() *meshv1alpha1.MeshConfig {
	return &meshv1alpha1.MeshConfig{
		RootNamespace:                  DefaultRootNamespace,
		ConnectTimeout:                 durationpb.New(10e9),
		OutboundTrafficPolicy:          &meshv1alpha1.MeshConfig_OutboundTrafficPolicy{Mode: meshv1alpha1.MeshConfig_OutboundTrafficPolicy_ALLOW_ANY},
		DefaultServiceExportTo:         []string{"*"},
		DefaultVirtualServiceExportTo:  []string{"*"},
		DefaultDestinationRuleExportTo: []string{"*"},
		DnsRefreshRate:                 durationpb.New(DefaultDNSRefreshRate),
		// Istio enables locality load balancing by default; it changes
		// load assignments only with outlier detection (failover) or a
		// distribute setting.
		LocalityLbSetting: &networkingv1alpha3.LocalityLoadBalancerSetting{Enabled: wrapperspb.Bool(true)},
		EnableAutoMtls:    wrapperspb.Bool(true),
		TrustDomain:       DefaultTrustDomain,
	}
}

var defaultProto = defaults()

// Default is the mesh config without a file: Istio's defaults.
func Default() *MeshConfig { return &MeshConfig{proto: defaults()} }

// New wraps a MeshConfig proto, which must not be modified afterwards.
// Fields it leaves unset read as Istio's defaults where the accessors say so.
func New(p *meshv1alpha1.MeshConfig) *MeshConfig { return &MeshConfig{proto: p} }

// Proto returns the MeshConfig. Read-only.
func (c *MeshConfig) Proto() *meshv1alpha1.MeshConfig {
	if c == nil || c.proto == nil {
		return defaultProto
	}
	return c.proto
}

// OutboundMode is the outbound traffic policy mode (ALLOW_ANY by default).
func (c *MeshConfig) OutboundMode() Mode {
	p := c.Proto().GetOutboundTrafficPolicy()
	if p == nil || p.GetMode() == meshv1alpha1.MeshConfig_OutboundTrafficPolicy_ALLOW_ANY {
		return AllowAny
	}
	return RegistryOnly
}

// RootNamespace is the config root namespace, istio-system by default.
func (c *MeshConfig) RootNamespace() string {
	if ns := c.Proto().GetRootNamespace(); ns != "" {
		return ns
	}
	return DefaultRootNamespace
}

// DefaultServiceExportTo is the visibility of services (Kubernetes Services
// and ServiceEntries) that set none: ["*"] by default.
func (c *MeshConfig) DefaultServiceExportTo() []string {
	return orPublic(c.Proto().GetDefaultServiceExportTo())
}

// DefaultDestinationRuleExportTo is the visibility of DestinationRules that
// set none: ["*"] by default.
func (c *MeshConfig) DefaultDestinationRuleExportTo() []string {
	return orPublic(c.Proto().GetDefaultDestinationRuleExportTo())
}

// DefaultTrafficPolicy is the mesh-wide baseline for outbound clusters'
// connection pool and outlier detection (nil when unset): a
// DestinationRule block that is set replaces the baseline's block.
func (c *MeshConfig) DefaultTrafficPolicy() *meshv1alpha1.MeshConfig_DefaultTrafficPolicy {
	return c.Proto().GetDefaultTrafficPolicy()
}

// LocalityLbSetting is the mesh-wide locality load balancing setting
// (localityLbSetting), used for destinations whose DestinationRule sets
// none: enabled, without distribute or failover, by default. nil when a
// config made by [New] sets none.
func (c *MeshConfig) LocalityLbSetting() *networkingv1alpha3.LocalityLoadBalancerSetting {
	return c.Proto().GetLocalityLbSetting()
}

// DefaultHTTPRetryPolicy is the mesh's defaultHttpRetryPolicy: the retries
// of outbound HTTP routes that set none (a VirtualService's route without
// retries, a service's default route). nil means Istio's built-in default;
// attempts 0 turns retries off.
func (c *MeshConfig) DefaultHTTPRetryPolicy() *networkingv1alpha3.HTTPRetry {
	return c.Proto().GetDefaultHttpRetryPolicy()
}

// DefaultInboundHTTPRetryPolicy is the mesh's defaultInboundHttpRetryPolicy:
// the retries of a sidecar's inbound HTTP routes to its application. nil
// means Istio's built-in default; attempts 0 turns retries off.
func (c *MeshConfig) DefaultInboundHTTPRetryPolicy() *networkingv1alpha3.HTTPRetry {
	return c.Proto().GetDefaultInboundHttpRetryPolicy()
}

// DNSRefreshRate is the mesh's dnsRefreshRate, the refresh rate of the
// clusters Envoy resolves by DNS: 60s by default, and when a config made
// by [New] sets none.
func (c *MeshConfig) DNSRefreshRate() time.Duration {
	if d := c.Proto().GetDnsRefreshRate(); d != nil {
		return d.AsDuration()
	}
	return DefaultDNSRefreshRate
}

// AutoMTLS reports whether clients send Istio mTLS to destinations that
// set no TLS of their own (enableAutoMtls): to the endpoints that have a
// sidecar (tlsMode istio), unless PeerAuthentication disables mTLS in the
// destination's namespace. True by default, and when unset.
func (c *MeshConfig) AutoMTLS() bool {
	v := c.Proto().GetEnableAutoMtls()
	return v == nil || v.GetValue()
}

// TrustDomain is the trust domain of the mesh's workload identities,
// cluster.local by default.
func (c *MeshConfig) TrustDomain() string {
	if td := c.Proto().GetTrustDomain(); td != "" {
		return td
	}
	return DefaultTrustDomain
}

var public = []string{"*"}

func orPublic(v []string) []string {
	if len(v) == 0 {
		return public
	}
	return v
}

// Parse reads a mesh config in MeshConfig's YAML (or JSON) shape, merged
// onto Istio's defaults.
func Parse(data []byte) (*MeshConfig, error) {
	js, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("mesh config: %w", err)
	}
	p := defaults()
	if s := string(js); s != "null" && s != "" {
		override := &meshv1alpha1.MeshConfig{}
		if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(js, override); err != nil {
			return nil, fmt.Errorf("mesh config: %w", err)
		}
		// Repeated fields the file sets replace the default lists instead of
		// appending to them, as Istio's merge of a mesh config does.
		for _, l := range []struct{ dst, src *[]string }{
			{&p.DefaultServiceExportTo, &override.DefaultServiceExportTo},
			{&p.DefaultVirtualServiceExportTo, &override.DefaultVirtualServiceExportTo},
			{&p.DefaultDestinationRuleExportTo, &override.DefaultDestinationRuleExportTo},
		} {
			if len(*l.src) > 0 {
				*l.dst = nil
			}
		}
		if override.DnsRefreshRate != nil {
			// Merged field by field, 0.5s onto 60s would read 60.5s.
			p.DnsRefreshRate = nil
		}
		if override.LocalityLbSetting != nil {
			// Replaced whole: a merge would keep the default's
			// enabled: true under a file's enabled: false.
			p.LocalityLbSetting = nil
		}
		if override.EnableAutoMtls != nil {
			p.EnableAutoMtls = nil // as above: false is the wrapper's zero
		}
		proto.Merge(p, override)
		// Merging skips zero values, and REGISTRY_ONLY is the enum's zero;
		// unknown enum names are discarded with unknown fields. Read the
		// mode itself: absent keeps the default, unknown is an error.
		mode, set, err := outboundMode(js)
		if err != nil {
			return nil, err
		}
		if set {
			p.OutboundTrafficPolicy = &meshv1alpha1.MeshConfig_OutboundTrafficPolicy{Mode: mode}
		}
	}
	return &MeshConfig{proto: p}, nil
}

// outboundMode reads outboundTrafficPolicy.mode from a mesh config's JSON.
func outboundMode(js []byte) (meshv1alpha1.MeshConfig_OutboundTrafficPolicy_Mode, bool, error) {
	var v struct {
		OutboundTrafficPolicy struct {
			Mode *string `json:"mode"`
		} `json:"outboundTrafficPolicy"`
	}
	if err := yaml.Unmarshal(js, &v); err != nil {
		return 0, false, fmt.Errorf("mesh config: %w", err)
	}
	m := v.OutboundTrafficPolicy.Mode
	if m == nil {
		return 0, false, nil
	}
	switch Mode(*m) {
	case AllowAny:
		return meshv1alpha1.MeshConfig_OutboundTrafficPolicy_ALLOW_ANY, true, nil
	case RegistryOnly:
		return meshv1alpha1.MeshConfig_OutboundTrafficPolicy_REGISTRY_ONLY, true, nil
	}
	return 0, false, fmt.Errorf("mesh config: outboundTrafficPolicy.mode %q: want %s or %s", *m, AllowAny, RegistryOnly)
}

// Load reads the mesh config file at path; "" is the default mesh config.
func Load(path string) (*MeshConfig, error) {
	if path == "" {
		return Default(), nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("mesh config: %w", err)
	}
	c, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}
