package manifest

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkParse parses a file of 100 Service and EndpointSlice documents.
func BenchmarkParse(b *testing.B) {
	var sb strings.Builder
	for i := range 50 {
		fmt.Fprintf(&sb, `---
apiVersion: v1
kind: Service
metadata:
  name: svc-%[1]d
  namespace: ns-%[2]d
  labels: {app: svc-%[1]d}
spec:
  selector: {app: svc-%[1]d}
  ports:
  - {name: http, port: 8080, targetPort: 8080}
  - {name: grpc, port: 9090}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: svc-%[1]d-abcde
  namespace: ns-%[2]d
  labels: {kubernetes.io/service-name: svc-%[1]d}
addressType: IPv4
endpoints:
- addresses: [10.1.%[2]d.1]
  conditions: {ready: true}
- addresses: [10.1.%[2]d.2]
  conditions: {ready: true}
ports:
- {name: http, port: 8080, protocol: TCP}
`, i, i%10)
	}
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		objs, errs := Parse("bench.yaml", data)
		if len(objs) != 100 || len(errs) != 0 {
			b.Fatalf("%d objects, errors %v", len(objs), errs)
		}
	}
}
