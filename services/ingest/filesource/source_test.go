package filesource_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

func TestDirectoryEndToEnd(t *testing.T) {
	w := newWorld(t)
	w.write("a.yaml", svc("a", "80")+"---\n"+configMap("c", "1"))
	w.write("sub/b.yaml", `apiVersion: v1
kind: List
items:
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: e1, namespace: bookinfo}
  addressType: IPv4
  endpoints: [{addresses: [10.0.0.1]}]
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata: {name: e2, namespace: bookinfo}
  addressType: IPv4
  endpoints: [{addresses: [10.0.0.2]}]
`)
	w.write("notes.txt", "not a manifest")
	w.write(".hidden.yaml", svc("hidden", "1"))
	r := w.start()
	if r.ready != (publish.Result{Published: 4}) {
		t.Fatalf("initial scan: %+v, want 4 published", r.ready)
	}
	recs := w.expect("OP_ADD ConfigMap default/c", "OP_ADD EndpointSlice bookinfo/e1", "OP_ADD EndpointSlice bookinfo/e2", "OP_ADD Service default/a")
	for _, rec := range recs {
		if !strings.HasPrefix(rec.Rec.GetSource(), "file:") || rec.Rec.GetCluster() != cluster {
			t.Errorf("record %s: source %q cluster %q", rec.Summary(), rec.Rec.GetSource(), rec.Rec.GetCluster())
		}
	}
	if got := recs[1].Rec.GetSource(); got != "file:sub/b.yaml#0/items/0" {
		t.Errorf("list item source = %q", got)
	}
	if got := recs[0].Rec.GetSource(); got != "file:a.yaml#1" {
		t.Errorf("second document source = %q", got)
	}

	t.Log("edit in place: only the changed object is published")
	w.write("a.yaml", svc("a", "81")+"---\n"+configMap("c", "1"))
	recs = w.expect("OP_UPDATE Service default/a")
	if !strings.Contains(string(recs[0].Rec.GetObject()), `"port":81`) {
		t.Errorf("update carries %s", recs[0].Rec.GetObject())
	}

	t.Log("edit by rename, as editors do")
	w.writeByRename("a.yaml", svc("a", "81")+"---\n"+configMap("c", "2"))
	recs = w.expect("OP_UPDATE ConfigMap default/c")
	if !strings.Contains(string(recs[0].Rec.GetObject()), `"v":"2"`) {
		t.Errorf("update carries %s", recs[0].Rec.GetObject())
	}

	t.Log("delete a file: its objects are deleted, with their last state")
	w.remove("sub/b.yaml")
	recs = w.expect("OP_DELETE EndpointSlice bookinfo/e1", "OP_DELETE EndpointSlice bookinfo/e2")
	if !strings.Contains(string(recs[0].Rec.GetObject()), "10.0.0.1") || recs[0].Rec.GetUid() == "" {
		t.Errorf("delete carries uid %q object %s", recs[0].Rec.GetUid(), recs[0].Rec.GetObject())
	}

	t.Log("a malformed file among good ones: the good documents flow, the bad are counted")
	malformedBefore := r.metric(t, "pilotwire_ingest_invalid_documents_total", map[string]string{"reason": "malformed_yaml"})
	w.write("bad.yaml", svc("g1", "1")+"---\napiVersion: v1\nmetadata: {name: nokind}\n---\nkey: [unclosed\n---\n"+svc("g2", "2"))
	w.write("broken.yaml", "\tthis: is: not yaml\n")
	w.expect("OP_ADD Service default/g1", "OP_ADD Service default/g2")
	if got := r.metric(t, "pilotwire_ingest_invalid_documents_total", map[string]string{"reason": "missing_kind"}); got != 1 {
		t.Errorf("invalid{missing_kind} = %v, want 1", got)
	}
	if got := r.metric(t, "pilotwire_ingest_invalid_documents_total", map[string]string{"reason": "malformed_yaml"}); got < malformedBefore+2 {
		t.Errorf("invalid{malformed_yaml} = %v, want at least %v", got, malformedBefore+2)
	}
	for _, want := range []string{
		`msg="skipping invalid manifest document" file=bad.yaml doc=1 reason=missing_kind`,
		`file=bad.yaml doc=2 reason=malformed_yaml`,
		`file=broken.yaml doc=0 reason=malformed_yaml`,
	} {
		if !strings.Contains(r.logs.String(), want) {
			t.Errorf("logs lack %q", want)
		}
	}

	t.Log("breaking a file deletes nothing; fixing it applies what it now says")
	w.write("a.yaml", "apiVersion: v1\nkind: Service\nmetadata: [oops\n")
	w.expect()
	w.write("a.yaml", svc("a", "81"))
	recs = w.expect("OP_DELETE ConfigMap default/c")
	if !strings.Contains(string(recs[0].Rec.GetObject()), `"v":"2"`) {
		t.Errorf("delete after fix carries %s", recs[0].Rec.GetObject())
	}

	t.Log("new subdirectories are watched")
	w.write("new/deep/d.yaml", configMap("d", "1"))
	w.expect("OP_ADD ConfigMap default/d")
	w.write("new/deep/d.yaml", configMap("d", "2"))
	w.expect("OP_UPDATE ConfigMap default/d")

	t.Log("an object in two files: the lexically first wins until it goes")
	dupsBefore := r.metric(t, "pilotwire_ingest_duplicate_objects_total", nil)
	w.write("dup.yaml", svc("a", "99"))
	w.expect()
	if got := r.metric(t, "pilotwire_ingest_duplicate_objects_total", nil); got <= dupsBefore {
		t.Errorf("duplicates = %v, want more than %v", got, dupsBefore)
	}
	if !strings.Contains(r.logs.String(), `winner=a.yaml ignored=dup.yaml`) {
		t.Errorf("no duplicate warning in logs")
	}
	w.remove("a.yaml")
	recs = w.expect("OP_UPDATE Service default/a")
	if !strings.Contains(string(recs[0].Rec.GetObject()), `"port":99`) || recs[0].Rec.GetSource() != "file:dup.yaml#0" {
		t.Errorf("takeover carries %s from %s", recs[0].Rec.GetObject(), recs[0].Rec.GetSource())
	}

	t.Log("moving files and directories changes nothing; files stay watched")
	w.rename("dup.yaml", "moved.yaml")
	w.expect()
	w.rename("new", "renamed")
	w.expect()
	w.write("renamed/deep/d.yaml", configMap("d", "3"))
	w.expect("OP_UPDATE ConfigMap default/d")
	w.remove("renamed")
	w.expect("OP_DELETE ConfigMap default/d")
}

func TestRestart(t *testing.T) {
	w := newWorld(t)
	w.write("a.yaml", svc("one", "1")+"---\n"+svc("two", "1"))
	w.write("b.yaml", svc("three", "1"))
	r1 := w.start()
	if r1.ready.Published != 3 {
		t.Fatalf("first run: %+v", r1.ready)
	}
	w.expect("OP_ADD Service default/one", "OP_ADD Service default/two", "OP_ADD Service default/three")
	r1.stop()

	t.Log("unchanged files: a restart publishes nothing")
	r2 := w.start()
	if r2.ready != (publish.Result{Unchanged: 4}) { // 3 services and the barrier
		t.Errorf("second run: %+v, want 4 unchanged", r2.ready)
	}
	w.expect()
	r2.stop()

	t.Log("while down: b.yaml deleted, a.yaml broken; the restart deletes three only")
	w.remove("b.yaml")
	w.write("a.yaml", svc("one", "1")+"---\nkind: [\n")
	r3 := w.start()
	if r3.ready.Published != 1 {
		t.Errorf("third run: %+v, want 1 published", r3.ready)
	}
	w.expect("OP_DELETE Service default/three")
	if !strings.Contains(r3.logs.String(), "file=a.yaml doc=1 reason=malformed_yaml") {
		t.Errorf("no warning for the broken document:\n%s", r3.logs)
	}

	t.Log("once fixed, the object it no longer defines is deleted with its last state")
	w.write("a.yaml", svc("one", "1"))
	recs := w.expect("OP_DELETE Service default/two")
	if !strings.Contains(string(recs[0].Rec.GetObject()), `"name":"two"`) {
		t.Errorf("delete carries %s", recs[0].Rec.GetObject())
	}
}

// TestConfigMapVolume updates the directory the way the kubelet updates a
// ConfigMap volume: files are links through ..data, which is swapped
// atomically; no event names the files themselves.
func TestConfigMapVolume(t *testing.T) {
	w := newWorld(t)
	link := func(target, name string) {
		t.Helper()
		if err := os.Symlink(target, filepath.Join(w.dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	w.write("..2026_01_01/mesh.yaml", configMap("m", "1"))
	link("..2026_01_01", "..data")
	link("..data/mesh.yaml", "mesh.yaml")
	r := w.start()
	if r.ready.Published != 1 {
		t.Fatalf("initial: %+v", r.ready)
	}
	w.expect("OP_ADD ConfigMap default/m")

	w.write("..2026_01_02/mesh.yaml", configMap("m", "2"))
	link("..2026_01_02", "..data_tmp")
	w.rename("..data_tmp", "..data")
	w.remove("..2026_01_01")
	recs := w.expect("OP_UPDATE ConfigMap default/m")
	if !strings.Contains(string(recs[0].Rec.GetObject()), `"v":"2"`) {
		t.Errorf("update carries %s", recs[0].Rec.GetObject())
	}
}

func TestMissingDirIsAnError(t *testing.T) {
	w := newWorld(t)
	pub, err := publish.New(w.js, publish.Options{Cluster: cluster, Names: names})
	if err != nil {
		t.Fatal(err)
	}
	src, err := filesourceNew(pub, filepath.Join(w.dir, "nope"))
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Run(t.Context(), nil); err == nil {
		t.Fatal("Run on a missing directory succeeded")
	}
}
