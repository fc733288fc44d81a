package yamldir

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
)

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

const svcA = "apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: ns}\nspec: {clusterIP: 10.0.0.1, ports: [{name: http, port: 80}]}\n"
const svcA2 = "apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: ns}\nspec: {clusterIP: 10.0.0.1, ports: [{name: http, port: 81}]}\n"
const svcB = "apiVersion: v1\nkind: Service\nmetadata: {name: b, namespace: ns}\nspec: {clusterIP: 10.0.0.2, ports: [{name: http, port: 80}]}\n"

func ops(recs []*pb.ChangeRecord) []string {
	var out []string
	for _, r := range recs {
		out = append(out, r.GetOp().String()+" "+r.GetRef().GetKind()+" "+r.GetRef().GetName())
	}
	return out
}

func TestDiffs(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.yaml", svcA)
	write(t, dir, "sub/b.yml", svcB)
	write(t, dir, ".hidden.yaml", svcB)
	write(t, dir, "notes.txt", "not a manifest")
	d := New(dir, "c1")
	recs, errs := d.Scan()
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if diff := cmp.Diff([]string{"OP_ADD Service a", "OP_ADD Service b"}, ops(recs)); diff != "" {
		t.Fatalf("first scan (-want +got):\n%s", diff)
	}
	if recs[0].GetCluster() != "c1" || recs[0].GetRef().GetVersion() != "v1" || len(recs[0].GetObject()) == 0 || recs[0].GetUid() == "" {
		t.Errorf("record lacks fields: %v", recs[0])
	}

	// Nothing changed: nothing to publish.
	if recs, _ := d.Reload([]string{"a.yaml"}); len(recs) != 0 {
		t.Errorf("unchanged file gave %v", ops(recs))
	}
	write(t, dir, "a.yaml", svcA2)
	recs, _ = d.Reload([]string{"a.yaml"})
	if diff := cmp.Diff([]string{"OP_UPDATE Service a"}, ops(recs)); diff != "" {
		t.Errorf("update (-want +got):\n%s", diff)
	}
	if err := os.Remove(filepath.Join(dir, "sub/b.yml")); err != nil {
		t.Fatal(err)
	}
	recs, _ = d.Scan()
	if diff := cmp.Diff([]string{"OP_DELETE Service b"}, ops(recs)); diff != "" {
		t.Errorf("delete (-want +got):\n%s", diff)
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a.yaml", svcA+"---\n"+svcB)
	store, err := Load(dir, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if got := len(store.Snapshot().Services); got != 2 {
		t.Errorf("%d services, want 2", got)
	}
	write(t, dir, "bad.yaml", "kind: [")
	if _, err := Load(dir, "c1"); err == nil {
		t.Error("invalid manifest: want an error")
	}
}
