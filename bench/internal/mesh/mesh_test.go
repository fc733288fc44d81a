package mesh

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pilotwire/pilotwire/services/ingest/manifest"
)

// files renders every service of m.
func files(m *Mesh) map[string]string {
	out := make(map[string]string)
	for _, s := range m.Services() {
		out[FileName(s)] = string(Render(s))
	}
	return out
}

// trace runs the benchmark's change sequence on m and returns the files
// after each step.
func trace(m *Mesh) []map[string]string {
	var out []map[string]string
	m.ChangeEndpoint()
	out = append(out, files(m))
	m.AddService()
	out = append(out, files(m))
	for _, step := range m.RestartPlan(25, 4) {
		m.Restart(step)
		out = append(out, files(m))
	}
	return out
}

func mustNew(t *testing.T, s Spec) *Mesh {
	t.Helper()
	m, err := New(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestDeterministic(t *testing.T) {
	spec := Spec{Services: 30, Endpoints: 4, Seed: 42}
	a, b := mustNew(t, spec), mustNew(t, spec)
	if diff := cmp.Diff(files(a), files(b)); diff != "" {
		t.Fatalf("same spec, different meshes (-a +b):\n%s", diff)
	}
	if diff := cmp.Diff(trace(a), trace(b)); diff != "" {
		t.Fatalf("same spec, different traces (-a +b):\n%s", diff)
	}
	c := mustNew(t, Spec{Services: 30, Endpoints: 4, Seed: 43})
	if cmp.Equal(files(a), files(c)) {
		t.Error("different seeds gave the same mesh")
	}
}

func TestShape(t *testing.T) {
	m := mustNew(t, Spec{Services: 100, Endpoints: 10, Seed: 1})
	if got := len(m.Services()); got != 100 {
		t.Fatalf("%d services, want 100", got)
	}
	if got := m.EndpointCount(); got != 1000 {
		t.Errorf("%d endpoints, want 1000", got)
	}
	ips := make(map[string]bool)
	grpc, tcp := 0, 0
	for _, s := range m.Services() {
		for _, e := range s.Endpoints {
			if ips[e.IP] {
				t.Fatalf("IP %s used twice", e.IP)
			}
			ips[e.IP] = true
		}
		for _, p := range s.Ports {
			switch p.Name {
			case "grpc":
				grpc++
			case "tcp-admin":
				tcp++
			}
		}
	}
	if grpc == 0 || tcp == 0 || grpc > 50 || tcp > 30 {
		t.Errorf("%d services with a grpc port and %d with a tcp port; want a minority of each", grpc, tcp)
	}
}

func TestChanges(t *testing.T) {
	m := mustNew(t, Spec{Services: 10, Endpoints: 5, Seed: 9})
	before := files(m)
	s := m.ChangeEndpoint()
	after := files(m)
	for name := range before {
		if (before[name] != after[name]) != (name == FileName(s)) {
			t.Errorf("file %s changed=%v, want only %s changed", name, before[name] != after[name], FileName(s))
		}
	}
	added := m.AddService()
	if added.Index != 10 || len(added.Endpoints) != 5 {
		t.Errorf("added service %d with %d endpoints, want index 10 with 5", added.Index, len(added.Endpoints))
	}

	plan := m.RestartPlan(23, 5)
	sizes := []int{}
	seen := make(map[EndpointRef]bool)
	for _, step := range plan {
		sizes = append(sizes, len(step))
		for _, r := range step {
			if seen[r] {
				t.Fatalf("endpoint %v restarted twice", r)
			}
			seen[r] = true
		}
	}
	if diff := cmp.Diff([]int{5, 5, 5, 4, 4}, sizes); diff != "" {
		t.Errorf("batch sizes (-want +got):\n%s", diff)
	}
	old := m.Services()[plan[0][0].Service].Endpoints[plan[0][0].Endpoint]
	changed := m.Restart(plan[0])
	if len(changed) == 0 {
		t.Fatal("restart changed no service")
	}
	if now := m.Services()[plan[0][0].Service].Endpoints[plan[0][0].Endpoint]; now.IP == old.IP || now.Zone != old.Zone {
		t.Errorf("restarted endpoint %v -> %v; want a new IP in the same zone", old, now)
	}
	if got := len(m.RestartPlan(1000, 3)); got != 3 {
		t.Errorf("plan of more endpoints than exist has %d steps, want 3", got)
	}
	total := 0
	for _, st := range m.RestartPlan(1000, 3) {
		total += len(st)
	}
	if total != m.EndpointCount() {
		t.Errorf("capped plan restarts %d endpoints, want all %d", total, m.EndpointCount())
	}
}

// TestManifestsParse: ingest's parser accepts every generated document.
func TestManifestsParse(t *testing.T) {
	m := mustNew(t, Spec{Services: 12, Endpoints: 3, Seed: 5})
	dir := t.TempDir()
	if err := m.WriteAll(dir); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 12 {
		t.Fatalf("%d files, want 12 (no temporary files left)", len(entries))
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		objs, errs := manifest.Parse(e.Name(), data)
		if len(errs) > 0 || len(objs) != 2 {
			t.Fatalf("%s: %d objects, errors %v; want a Service and an EndpointSlice", e.Name(), len(objs), errs)
		}
		if objs[0].Kind != "Service" || objs[1].Kind != "EndpointSlice" || !strings.HasPrefix(objs[1].Name, objs[0].Name) {
			t.Errorf("%s: got %s/%s and %s/%s", e.Name(), objs[0].Kind, objs[0].Name, objs[1].Kind, objs[1].Name)
		}
	}
}

func TestNewRejectsEmpty(t *testing.T) {
	if _, err := New(Spec{Services: 0, Endpoints: 1}); err == nil {
		t.Error("no services: want an error")
	}
	if _, err := New(Spec{Services: 1, Endpoints: 0}); err == nil {
		t.Error("no endpoints: want an error")
	}
}
