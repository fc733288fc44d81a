package manifest

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzParseManifest checks that Parse never panics, that every object it
// returns is valid, and that its canonical JSON is a fixed point: parsing an
// object's JSON again yields the same object. Seeds live in
// testdata/fuzz/FuzzParseManifest and below.
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: Service\nmetadata:\n  name: a\n"))
	f.Add([]byte("---\napiVersion: v1\nkind: List\nitems:\n- {apiVersion: v1, kind: ConfigMap, metadata: {name: x}}\n...\n"))
	f.Add([]byte("--- {apiVersion: v1, kind: Namespace, metadata: {name: n, namespace: z}}\n--- |\n  text\n"))
	f.Add([]byte("a: &a [1,2]\nb: *a\nkind: 1\n"))
	f.Add([]byte(`{"apiVersion":"x/v1","kind":"K","metadata":{"name":"n","uid":7}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, errs := Parse("fuzz.yaml", data)
		prevDoc := -1
		for _, o := range objs {
			if o.Kind == "" || o.Version == "" || o.Name == "" {
				t.Fatalf("object without kind, version or name: %+v", o)
			}
			if o.Doc < prevDoc {
				t.Fatalf("documents out of order: %d after %d", o.Doc, prevDoc)
			}
			prevDoc = o.Doc
			if ScopeOf(o.Group, o.Kind) == Namespaced && o.Namespace == "" {
				t.Fatalf("namespaced %s/%s without namespace", o.Kind, o.Name)
			}
			if ScopeOf(o.Group, o.Kind) == ClusterScoped && o.Namespace != "" {
				t.Fatalf("cluster-scoped %s/%s with namespace %q", o.Kind, o.Name, o.Namespace)
			}
			if !json.Valid(o.JSON) {
				t.Fatalf("invalid JSON %q", o.JSON)
			}
			again, errs2 := Parse("again.json", o.JSON)
			if len(errs2) != 0 || len(again) != 1 {
				t.Fatalf("canonical JSON %q does not parse back to one object: %d objects, errors %v", o.JSON, len(again), errs2)
			}
			a := again[0]
			if !bytes.Equal(a.JSON, o.JSON) || a.Group != o.Group || a.Version != o.Version || a.Kind != o.Kind ||
				a.Namespace != o.Namespace || a.Name != o.Name || a.UID != o.UID {
				t.Fatalf("canonical form is not a fixed point:\n first %+v\nsecond %+v", o, a)
			}
		}
		for _, e := range errs {
			if e.File != "fuzz.yaml" || e.Reason == "" || e.Err == nil || e.Doc < 0 {
				t.Fatalf("incomplete error %#v", e)
			}
			_ = e.Error()
		}
	})
}
