// Package proto holds pilotwire's wire contracts. The .proto sources live in
// pilotwire/v1 next to their generated Go (package pilotwirev1); regenerate
// with `make proto` from the repository root.
package proto
