package helmtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

const (
	// defaultTestTimeout bounds each test's work (a cold kube-apiserver
	// start on 2 busy cores is the slow part, bounded by k8stest itself).
	defaultTestTimeout = 2 * time.Minute
	envHelm            = "PILOTWIRE_HELM"
	helmDefault        = ".cache/tools/bin/helm"
	chartDir           = "deploy/helm/pilotwire"
	bundleDir          = "deploy/helm/pilotwire-nats"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// repoRoot walks up from the package directory to the repository root.
func repoRoot(t testing.TB) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, chartDir, "Chart.yaml")); err == nil {
			return dir
		}
		if filepath.Dir(dir) == dir {
			t.Fatalf("no %s above %s", chartDir, wd)
		}
	}
}

// helmBin is the helm binary: $PILOTWIRE_HELM or .cache/tools/bin/helm.
// Under -short a missing one skips the test; otherwise it fails it.
func helmBin(t testing.TB) string {
	t.Helper()
	p := os.Getenv(envHelm)
	if p == "" {
		p = filepath.Join(repoRoot(t), helmDefault)
	}
	if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		if testing.Short() {
			t.Skipf("no helm at %s; skipped under -short", p)
		}
		t.Fatalf("no helm binary at %s: run `make helm` (it builds helm into .cache/tools/bin) or set $%s", p, envHelm)
	}
	return p
}

// helm runs the helm binary with args from the repo root and returns its
// standard output; a non-zero exit fails the test with its stderr.
func helm(t testing.TB, args ...string) string {
	t.Helper()
	out, err := helmErr(t, args...)
	if err != nil {
		t.Fatalf("helm %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func helmErr(t testing.TB, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), defaultTestTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, helmBin(t), args...)
	cmd.Dir = repoRoot(t)
	// No user config, cache or repositories: helm reads nothing but the chart.
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+home+"/config", "HELM_CACHE_HOME="+home+"/cache",
		"HELM_DATA_HOME="+home+"/data", "KUBECONFIG="+home+"/none")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, stderr.String())
	}
	return stdout.String(), nil
}

// render runs `helm template` on the chart with values in namespace ns
// and returns the objects, hooks included.
func render(t testing.TB, release, ns string, values map[string]any) []*unstructured.Unstructured {
	t.Helper()
	docs := renderDocs(t, release, ns, values)
	out := make([]*unstructured.Unstructured, len(docs))
	for i, d := range docs {
		out[i] = d.obj
	}
	return out
}

// doc is one rendered manifest: its YAML as helm wrote it and the object.
type doc struct {
	raw []byte
	obj *unstructured.Unstructured
}

func renderDocs(t testing.TB, release, ns string, values map[string]any) []doc {
	t.Helper()
	args := []string{"template", release, chartDir, "--namespace", ns}
	if len(values) > 0 {
		f := filepath.Join(t.TempDir(), "values.yaml")
		b, err := yaml.Marshal(values)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, b, 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--values", f)
	}
	docs, err := decodeManifests(helm(t, args...))
	if err != nil {
		t.Fatal(err)
	}
	return docs
}

// decodeManifests splits a multi-document YAML stream into objects.
func decodeManifests(s string) ([]doc, error) {
	var out []doc
	for raw := range strings.SplitSeq(s, "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(raw), &m); err != nil {
			return nil, fmt.Errorf("decode %q: %w", head(raw), err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("document without kind or name: %q", head(raw))
		}
		out = append(out, doc{raw: []byte(raw), obj: u})
	}
	if len(out) == 0 {
		return nil, errors.New("no objects rendered")
	}
	return out, nil
}

func head(s string) string {
	s = strings.TrimSpace(s)
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// find returns the rendered object of kind and name, failing the test
// when there is none.
func find(t testing.TB, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	t.Fatalf("no %s %s rendered", kind, name)
	return nil
}
