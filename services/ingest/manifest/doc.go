// Package manifest turns a file of Kubernetes manifests (YAML or JSON, one
// or more documents separated by "---", and "kind: List" documents) into
// validated objects with canonical JSON.
//
// It is pure: no file system, no clock, no logging. Parse reports every bad
// document as an *Error naming the file, the document index and the reason,
// and still returns the good documents of the same file.
package manifest
