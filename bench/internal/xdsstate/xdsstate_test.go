package xdsstate

import (
	"strings"
	"testing"

	"github.com/pilotwire/pilotwire/bench/internal/mesh"
	"github.com/pilotwire/pilotwire/bench/internal/yamldir"
	"github.com/pilotwire/pilotwire/pkg/xdsgen"
)

func expectedOf(t *testing.T, dir string) *Config {
	t.Helper()
	store, err := yamldir.Load(dir, "Kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	c, err := Expected(store.Snapshot(), xdsgen.Envoy)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestExpectedFollowsReferences: every EDS cluster's load assignment and
// every listener's route configuration are part of the expected config.
func TestExpectedFollowsReferences(t *testing.T) {
	m, err := mesh.New(mesh.Spec{Services: 20, Endpoints: 3, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := m.WriteAll(dir); err != nil {
		t.Fatal(err)
	}
	c := expectedOf(t, dir)
	ports := 0
	for _, s := range m.Services() {
		ports += len(s.Ports)
	}
	// One cluster per service port, plus Istio's PassthroughCluster,
	// BlackHoleCluster and InboundPassthroughCluster, which have no load
	// assignment of their own (ORIGINAL_DST or static).
	const special = 3
	if got := len(c[CDS]); got != ports+special {
		t.Errorf("%d clusters, want one per service port (%d) and %d special ones", got, ports, special)
	}
	if got := len(c[EDS]); got != ports {
		t.Errorf("%d load assignments, want one per service port (%d)", got, ports)
	}
	for name, r := range c[CDS] {
		_, ok := c[EDS][name]
		if eds := strings.HasPrefix(name, "outbound|"); ok != eds {
			t.Errorf("cluster %s (%v): load assignment in the expected config %v, want %v", name, r, ok, eds)
		}
	}
	if len(c[LDS]) == 0 || len(c[RDS]) == 0 {
		t.Fatalf("no listeners (%d) or routes (%d)", len(c[LDS]), len(c[RDS]))
	}
	if _, ok := c[RDS]["80"]; !ok {
		t.Errorf("route configuration 80 missing; have %v", c[RDS])
	}
}

// TestStateTracksContent: the state changes with one endpoint, only in
// EDS, and Changed counts just the changed load assignment(s).
func TestStateTracksContent(t *testing.T) {
	m, err := mesh.New(mesh.Spec{Services: 10, Endpoints: 2, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := m.WriteAll(dir); err != nil {
		t.Fatal(err)
	}
	before := expectedOf(t, dir)
	again := expectedOf(t, dir)
	if before.State() != again.State() {
		t.Fatalf("same mesh, different states: %v vs %v", before.State(), again.State())
	}
	s := m.ChangeEndpoint()
	if _, err := mesh.Write(dir, s); err != nil {
		t.Fatal(err)
	}
	after := expectedOf(t, dir)
	b, a := before.State(), after.State()
	for _, typ := range []int{CDS, LDS, RDS} {
		if b[typ] != a[typ] {
			t.Errorf("%s state changed on an endpoint change", Names[typ])
		}
	}
	if b[EDS] == a[EDS] {
		t.Errorf("eds state did not change on an endpoint change")
	}
	n, bytes := Changed(before, after)
	if n != len(s.Ports) || bytes == 0 {
		t.Errorf("Changed = %d resources, %d bytes; want %d (one per port of %s) and some bytes", n, bytes, len(s.Ports), s.Name)
	}
	if n, _ := Changed(after, after); n != 0 {
		t.Errorf("Changed(x, x) = %d, want 0", n)
	}
}

func TestDecodeMatchesExpected(t *testing.T) {
	m, err := mesh.New(mesh.Spec{Services: 8, Endpoints: 2, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := m.WriteAll(dir); err != nil {
		t.Fatal(err)
	}
	store, err := yamldir.Load(dir, "Kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	for typ := range NumTypes {
		set, err := xdsgen.Generate(store.Snapshot(), xdsgen.Envoy, TypeURLs[typ])
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range set.Resources {
			d, err := Decode(typ, r.Any.GetValue())
			if err != nil {
				t.Fatal(err)
			}
			if d.Name != r.Name {
				t.Errorf("Decode name %q, want %q", d.Name, r.Name)
			}
			want, _ := Refs(r.Msg)
			if len(d.Refs) != len(want) {
				t.Errorf("%s refs %v, want %v", r.Name, d.Refs, want)
			}
			if typ == CDS && strings.HasPrefix(r.Name, "outbound|") && len(d.Refs) != 1 {
				t.Errorf("EDS cluster %s refs %v, want its own load assignment", r.Name, d.Refs)
			}
		}
	}
}

func TestEntryHashOrderIndependent(t *testing.T) {
	a := Config{CDS: {"x": {Content: 1}, "y": {Content: 2}}}
	b := Config{CDS: {"y": {Content: 2}, "x": {Content: 1}}}
	if a.State() != b.State() {
		t.Error("same set, different state")
	}
	c := Config{CDS: {"x": {Content: 2}, "y": {Content: 1}}}
	if a.State() == c.State() {
		t.Error("contents swapped between names, same state")
	}
	if EntryHash("ab", 1) == EntryHash("a", 1) {
		t.Error("names not distinguished")
	}
}
