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
	// Severity is how bad ignoring it is: an error when traffic that
	// the ignored config would refuse is let through (a policy that
	// fails open), a warning otherwise.
	Severity Severity `json:",omitempty"`
}

// Severity is how bad ignoring a [Problem] is.
type Severity uint8

const (
	// SeverityWarning is config left out whose absence refuses no
	// traffic it should let through and lets through none it should
	// refuse, or only changes how traffic is handled.
	SeverityWarning Severity = iota
	// SeverityError is config left out that would refuse traffic when
	// applied, so leaving it out lets that traffic through.
	SeverityError
)

func (s Severity) String() string {
	if s == SeverityError {
		return "error"
	}
	return "warning"
}

// MarshalText writes the severity's name.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// Kind is the kind of the problem's object (Kind of
// <cluster>/<Kind>/<namespace>/<name>), "MeshConfig" for the mesh
// config's, "" when Object names no kind.
func (p Problem) Kind() string {
	if p.Object == MeshConfigObject {
		return "MeshConfig"
	}
	parts := strings.SplitN(p.Object, "/", 4)
	if len(parts) != 4 {
		return ""
	}
	return parts[1]
}

func objectName(k ObjectKey) string {
	return k.Cluster + "/" + k.Kind + "/" + k.Namespace + "/" + k.Name
}

// Problems returns what the mesh ignores, sorted by object then reason.
// Read-only.
func (m *Mesh) Problems() []Problem { return m.content.problems }

func sortProblems(ps []Problem) []Problem {
	slices.SortFunc(ps, func(a, b Problem) int {
		return cmp.Or(strings.Compare(a.Object, b.Object), strings.Compare(a.Reason, b.Reason), cmp.Compare(a.Severity, b.Severity))
	})
	return slices.Compact(ps)
}
