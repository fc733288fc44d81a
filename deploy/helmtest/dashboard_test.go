package helmtest

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

var metricRE = regexp.MustCompile(`\b(pilot|pilotwire)_[a-z0-9_]+\b`)

// definedMetrics are the metric names the product's code registers: every
// `Name: "pilot..."` in a non-test Go file under services/ and pkg/.
func definedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	nameRE := regexp.MustCompile(`Name:\s*"((?:pilot|pilotwire)_[a-z0-9_]+)"`)
	out := map[string]bool{}
	root := repoRoot(t)
	for _, dir := range []string{"services", "pkg"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			for _, m := range nameRE.FindAllStringSubmatch(string(b), -1) {
				out[m[1]] = true
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(out) < 50 {
		t.Fatalf("found only %d metric names in the code; the pattern has gone stale", len(out))
	}
	return out
}

// TestDashboard renders the chart's Grafana dashboard ConfigMap and checks
// that it is a dashboard whose every query names metrics the services
// export, covering each stage; and that the HPA's connection metric is
// one too.
func TestDashboard(t *testing.T) {
	defined := definedMetrics(t)
	objs := render(t, "pw", "pilotwire", nil)
	cm := find(t, objs, "ConfigMap", "pw-pilotwire-dashboard")
	if cm.GetLabels()["grafana_dashboard"] != "1" {
		t.Errorf("dashboard labels %v: no grafana_dashboard=1", cm.GetLabels())
	}
	data, _, _ := unstructured.NestedString(cm.Object, "data", "pilotwire.json")
	var dash struct {
		Title  string
		UID    string
		Panels []struct {
			Type    string
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal([]byte(data), &dash); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	if dash.Title == "" || dash.UID == "" {
		t.Errorf("dashboard title %q uid %q", dash.Title, dash.UID)
	}
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			names := metricRE.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q names no pilotwire metric", p.Title, tg.Expr)
			}
			for _, n := range names {
				base := n
				for _, suf := range []string{"_bucket", "_sum", "_count"} {
					if b, ok := strings.CutSuffix(n, suf); ok && defined[b] {
						base = b
					}
				}
				if !defined[base] {
					t.Errorf("panel %q: metric %s is not defined by any service", p.Title, n)
				}
				used[base] = true
			}
		}
	}
	// Each stage the issue names: ingest rate, debounce merges, queue
	// depth, convergence, NACKs.
	for _, m := range []string{
		"pilotwire_ingest_records_published_total", "pilotwire_debounce_merged_events",
		"pilotwire_pusher_queue_length", "pilot_proxy_convergence_time", "pilot_total_xds_rejects",
	} {
		if !used[m] {
			t.Errorf("the dashboard does not show %s", m)
		}
	}

	hpa := find(t, render(t, "pw", "pilotwire", map[string]any{
		"ads": map[string]any{"autoscaling": map[string]any{"connections": map[string]any{"enabled": true}}},
	}), "HorizontalPodAutoscaler", "pw-pilotwire-ads")
	ms, _, _ := unstructured.NestedSlice(hpa.Object, "spec", "metrics")
	var names []string
	for _, m := range ms {
		if n, ok, _ := unstructured.NestedString(m.(map[string]any), "pods", "metric", "name"); ok {
			names = append(names, n)
			if !defined[n] {
				t.Errorf("HPA metric %s is not defined by any service", n)
			}
		}
	}
	if !slices.Contains(names, "pilot_xds") {
		t.Errorf("HPA pods metrics %v, want the frontends' connection gauge pilot_xds", names)
	}
}
