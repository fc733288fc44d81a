package model

import (
	"cmp"
	"slices"
	"strings"
)

// Problem is an object, or part of one, that the mesh ignores, and why.
// Other objects are never affected by it.
type Problem struct {
	// Object is <cluster>/<Kind>/<namespace>/<name>.
	Object string
	// Reason says what was ignored and why.
	Reason string
}

func objectName(k ObjectKey) string {
	return k.Cluster + "/" + k.Kind + "/" + k.Namespace + "/" + k.Name
}

// Problems returns what the mesh ignores, sorted by object then reason.
// Read-only.
func (m *Mesh) Problems() []Problem { return m.content.problems }

func sortProblems(ps []Problem) []Problem {
	slices.SortFunc(ps, func(a, b Problem) int {
		return cmp.Or(strings.Compare(a.Object, b.Object), strings.Compare(a.Reason, b.Reason))
	})
	return slices.Compact(ps)
}
