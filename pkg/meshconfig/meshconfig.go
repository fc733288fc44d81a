// Package meshconfig reads the mesh-wide settings pilotwire shares with
// Istio's MeshConfig, from a file in MeshConfig's YAML shape:
//
//	outboundTrafficPolicy:
//	  mode: REGISTRY_ONLY
//
// Only the fields pilotwire acts on are read; every other MeshConfig field is
// accepted and ignored, so an Istio mesh config file can be used unchanged.
// istio.io/api is not a dependency: the struct below keeps MeshConfig's field
// names and defaults.
package meshconfig

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

// Mode is MeshConfig.OutboundTrafficPolicy.Mode.
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

// OutboundTrafficPolicy is MeshConfig.outboundTrafficPolicy.
type OutboundTrafficPolicy struct {
	Mode Mode `json:"mode,omitempty"`
}

// MeshConfig is the part of Istio's MeshConfig pilotwire reads. The zero
// value is the default mesh config.
type MeshConfig struct {
	OutboundTrafficPolicy *OutboundTrafficPolicy `json:"outboundTrafficPolicy,omitempty"`
}

// Default is the mesh config without a file: Istio's defaults.
func Default() *MeshConfig { return &MeshConfig{} }

// OutboundMode is the outbound traffic policy mode, ALLOW_ANY when unset.
func (c *MeshConfig) OutboundMode() Mode {
	if c == nil || c.OutboundTrafficPolicy == nil || c.OutboundTrafficPolicy.Mode == "" {
		return AllowAny
	}
	return c.OutboundTrafficPolicy.Mode
}

// Parse reads a mesh config in MeshConfig's YAML (or JSON) shape.
func Parse(data []byte) (*MeshConfig, error) {
	c := Default()
	if err := yaml.Unmarshal(data, c); err != nil {
		return nil, fmt.Errorf("mesh config: %w", err)
	}
	switch m := c.OutboundMode(); m {
	case AllowAny, RegistryOnly:
	default:
		return nil, fmt.Errorf("mesh config: outboundTrafficPolicy.mode %q: want %s or %s", m, AllowAny, RegistryOnly)
	}
	return c, nil
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
