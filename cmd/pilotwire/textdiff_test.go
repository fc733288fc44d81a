package main

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestUnifiedDiff(t *testing.T) {
	for _, tc := range []struct {
		name, a, b, want string
	}{
		{"equal", "a\nb", "a\nb", ""},
		{"one line changed", "a\nb\nc\nd\ne\nf\ng", "a\nb\nc\nX\ne\nf\ng",
			"--- A\n+++ B\n@@ -3,3 +3,3 @@\n c\n-d\n+X\n e\n"},
		{"added at the end", "a\nb", "a\nb\nc", "--- A\n+++ B\n@@ -2,1 +2,2 @@\n b\n+c\n"},
		{"two hunks", "1\n2\n3\n4\n5\n6\n7\n8\n9", "X\n2\n3\n4\n5\n6\n7\n8\nY",
			"--- A\n+++ B\n@@ -1,2 +1,2 @@\n-1\n+X\n 2\n@@ -8,2 +8,2 @@\n 8\n-9\n+Y\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, unifiedDiff("A", "B", tc.a, tc.b, 1)); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}
