package filesource

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

func mobj(name, rv, file string) publish.Object {
	return publish.Object{
		Key:             publish.Key{Kind: "Service", Namespace: "default", Name: name},
		Version:         "v1",
		ResourceVersion: rv,
		JSON:            []byte(`{"rv":"` + rv + `"}`),
		Source:          "file:" + file + "#0",
	}
}

func files(objs ...publish.Object) fileObjects {
	out := fileObjects{}
	for _, o := range objs {
		out[o.Key] = o
	}
	return out
}

// describe renders changes as "UPSERT name rv source" / "DELETE name rv".
func describe(cs []publish.Change) []string {
	var out []string
	for _, c := range cs {
		if c.Delete {
			out = append(out, "DELETE "+c.Object.Key.Name+" "+c.Object.ResourceVersion)
			continue
		}
		out = append(out, "UPSERT "+c.Object.Key.Name+" "+c.Object.ResourceVersion+" "+c.Object.Source)
	}
	return out
}

func TestModelUpdate(t *testing.T) {
	type step struct {
		update   map[string]fileObjects
		want     []string
		wantDups map[string][]string // key name -> files
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "add, edit, delete a file",
			steps: []step{
				{update: map[string]fileObjects{"a.yaml": files(mobj("x", "1", "a.yaml"), mobj("y", "1", "a.yaml"))},
					want: []string{"UPSERT x 1 file:a.yaml#0", "UPSERT y 1 file:a.yaml#0"}},
				{update: map[string]fileObjects{"a.yaml": files(mobj("x", "2", "a.yaml"), mobj("y", "1", "a.yaml"))},
					want: []string{"UPSERT x 2 file:a.yaml#0"}},
				{update: map[string]fileObjects{"a.yaml": files(mobj("x", "2", "a.yaml"), mobj("y", "1", "a.yaml"))}},
				{update: map[string]fileObjects{"a.yaml": nil},
					want: []string{"DELETE x 2", "DELETE y 1"}},
			},
		},
		{
			name: "lexically first file wins, the other takes over when it goes",
			steps: []step{
				{update: map[string]fileObjects{"b/z.yaml": files(mobj("x", "b", "b/z.yaml"))},
					want: []string{"UPSERT x b file:b/z.yaml#0"}},
				{update: map[string]fileObjects{"a.yaml": files(mobj("x", "a", "a.yaml"))},
					want:     []string{"UPSERT x a file:a.yaml#0"},
					wantDups: map[string][]string{"x": {"a.yaml", "b/z.yaml"}}},
				{update: map[string]fileObjects{"b/z.yaml": files(mobj("x", "b2", "b/z.yaml"))},
					wantDups: map[string][]string{"x": {"a.yaml", "b/z.yaml"}}},
				{update: map[string]fileObjects{"a.yaml": nil},
					want: []string{"UPSERT x b2 file:b/z.yaml#0"}},
			},
		},
		{
			name: "an object moving between files in one update is no change",
			steps: []step{
				{update: map[string]fileObjects{"a.yaml": files(mobj("x", "1", "a.yaml"))},
					want: []string{"UPSERT x 1 file:a.yaml#0"}},
				{update: map[string]fileObjects{"a.yaml": nil, "b.yaml": files(mobj("x", "1", "b.yaml"))}},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := newModel()
			for i, s := range tc.steps {
				changes, dups := m.update(s.update)
				if diff := cmp.Diff(s.want, describe(changes)); diff != "" {
					t.Errorf("step %d changes (-want +got):\n%s", i, diff)
				}
				gotDups := map[string][]string{}
				for _, d := range dups {
					gotDups[d.key.Name] = d.files
				}
				if s.wantDups == nil {
					s.wantDups = map[string][]string{}
				}
				if diff := cmp.Diff(s.wantDups, gotDups); diff != "" {
					t.Errorf("step %d duplicates (-want +got):\n%s", i, diff)
				}
			}
		})
	}
}

func TestModelDesiredAndFilesUnder(t *testing.T) {
	m := newModel()
	m.update(map[string]fileObjects{
		"b.yaml":     files(mobj("x", "b", "b.yaml")),
		"a.yaml":     files(mobj("x", "a", "a.yaml"), mobj("w", "1", "a.yaml")),
		"sub/c.yaml": files(mobj("v", "1", "sub/c.yaml")),
		"subway.yml": files(),
	})
	var got []string
	for _, o := range m.desired() {
		got = append(got, o.Key.Name+"@"+o.Source)
	}
	if diff := cmp.Diff([]string{"v@file:sub/c.yaml#0", "w@file:a.yaml#0", "x@file:a.yaml#0"}, got); diff != "" {
		t.Errorf("desired (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"sub/c.yaml"}, m.filesUnder("sub")); diff != "" {
		t.Errorf("filesUnder(sub) (-want +got):\n%s", diff)
	}
}

func TestPathHelpers(t *testing.T) {
	for _, tc := range []struct {
		src, file string
		ok        bool
	}{
		{"file:a/b.yaml#3", "a/b.yaml", true},
		{"file:we#ird.yaml#0/items/2", "we#ird.yaml", true},
		{"k8s:https://x", "", false},
		{"file:nohash", "", false},
	} {
		if file, ok := sourceFile(tc.src); file != tc.file || ok != tc.ok {
			t.Errorf("sourceFile(%q) = %q, %v; want %q, %v", tc.src, file, ok, tc.file, tc.ok)
		}
	}
	for name, want := range map[string]bool{
		"a.yaml": true, "b.YML": true, "c.json": true, ".a.yaml": false, "a.yaml.swp": false,
		"a.yaml~": false, "4913": false, "dir/x.yml": true,
	} {
		if got := isManifest(name); got != want {
			t.Errorf("isManifest(%q) = %v, want %v", name, got, want)
		}
	}
	for _, tc := range []struct {
		rel, dir string
		want     bool
	}{
		{"a/b.yaml", "a", true}, {"ab/c.yaml", "a", false}, {"a", "a", true}, {"x.yaml", "", true},
	} {
		if got := under(tc.rel, tc.dir); got != tc.want {
			t.Errorf("under(%q, %q) = %v, want %v", tc.rel, tc.dir, got, tc.want)
		}
	}
}
