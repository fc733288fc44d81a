package adstest

import "fmt"

// MeshYAML is the mesh the tests serve, in files as ingest reads them:
// echo (default, one gRPC port) and web (shop, HTTP on a named target
// port and a TCP admin port).
const MeshYAML = `apiVersion: v1
kind: Service
metadata: {name: echo, namespace: default}
spec:
  clusterIP: 10.96.0.20
  ports:
  - {name: grpc, port: 8080, targetPort: 9999}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: shop}
spec:
  clusterIP: 10.96.0.30
  ports:
  - {name: http, port: 80, targetPort: http-web}
  - {name: tcp-admin, port: 9000, targetPort: 9000}
`

// WebSlice is web's EndpointSlice: one endpoint, the pod of WebNode.
const WebSlice = `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web-1
  namespace: shop
  labels: {kubernetes.io/service-name: web}
addressType: IPv4
ports:
- {name: http, port: 8081}
- {name: tcp-admin, port: 9000}
endpoints:
- {addresses: ["10.244.1.5"], zone: zone-b}
`

// EchoSlice is an EndpointSlice of echo named name (port grpc 9080, zone
// zone-a) with the ready addresses, then the not-ready ones.
func EchoSlice(name string, ready []string, notReady ...string) string {
	s := `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: ` + name + `
  namespace: default
  labels: {kubernetes.io/service-name: echo}
addressType: IPv4
ports:
- {name: grpc, port: 9080}
endpoints:
`
	for _, a := range ready {
		s += fmt.Sprintf("- {addresses: [%q], conditions: {ready: true}, zone: zone-a}\n", a)
	}
	for _, a := range notReady {
		s += fmt.Sprintf("- {addresses: [%q], conditions: {ready: false}, zone: zone-a}\n", a)
	}
	return s
}
