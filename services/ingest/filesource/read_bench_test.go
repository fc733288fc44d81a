package filesource

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkReadAll reads and parses 2,000 manifest files (a Service and an
// EndpointSlice of 10 endpoints each), as the initial scan does.
func BenchmarkReadAll(b *testing.B) {
	dir := b.TempDir()
	var files []string
	for i := range 2000 {
		name := fmt.Sprintf("svc-%04d.yaml", i)
		doc := fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: s%d, namespace: ns}\nspec:\n  clusterIP: 10.96.%d.%d\n  ports: [{name: http, port: 80}]\n---\n"+
			"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s%d-1, namespace: ns, labels: {kubernetes.io/service-name: s%d}}\naddressType: IPv4\nports: [{name: http, port: 8080}]\nendpoints:\n", i, i/250, i%250, i, i)
		for e := range 10 {
			doc += fmt.Sprintf("- {addresses: [\"10.1.%d.%d\"], conditions: {ready: true}}\n", i%250, e)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(doc), 0o644); err != nil {
			b.Fatal(err)
		}
		files = append(files, name)
	}
	b.ReportAllocs()
	for b.Loop() {
		for _, r := range readAll(dir, files, 1<<20) {
			if len(r.objs) != 2 {
				b.Fatalf("%s: %d objects", r.rel, len(r.objs))
			}
		}
	}
	b.ReportMetric(float64(2*len(files)*b.N)/b.Elapsed().Seconds(), "objects/s")
}
