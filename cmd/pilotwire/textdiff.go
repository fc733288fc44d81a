package main

import (
	"fmt"
	"strings"
)

// unifiedDiff is a unified diff of two texts by lines, with ctx lines of
// context around each change; "" when they are equal. It uses a plain
// longest-common-subsequence table: resources are at most a few thousand
// lines.
func unifiedDiff(fromName, toName, a, b string, ctx int) string {
	if a == b {
		return ""
	}
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	n, m := len(x), len(y)
	lcs := make([][]int32, n+1)
	for i := range lcs {
		lcs[i] = make([]int32, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	type line struct {
		op   byte // ' ', '-', '+'
		text string
		i, j int // line numbers (0-based) in a and b before this line
	}
	var ls []line
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && x[i] == y[j]:
			ls = append(ls, line{' ', x[i], i, j})
			i++
			j++
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]): // deletions first
			ls = append(ls, line{'-', x[i], i, j})
			i++
		default:
			ls = append(ls, line{'+', y[j], i, j})
			j++
		}
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "--- %s\n+++ %s\n", fromName, toName)
	for k := 0; k < len(ls); {
		if ls[k].op == ' ' {
			k++
			continue
		}
		start := max(k-ctx, 0)
		end := k
		for end < len(ls) { // extend while changes are within 2*ctx of each other
			if ls[end].op != ' ' {
				end++
				continue
			}
			next := end
			for next < len(ls) && ls[next].op == ' ' {
				next++
			}
			if next == len(ls) || next-end > 2*ctx {
				end = min(end+ctx, len(ls))
				break
			}
			end = next
		}
		var na, nb int
		for _, l := range ls[start:end] {
			if l.op != '+' {
				na++
			}
			if l.op != '-' {
				nb++
			}
		}
		fmt.Fprintf(&sb, "@@ -%d,%d +%d,%d @@\n", ls[start].i+1, na, ls[start].j+1, nb)
		for _, l := range ls[start:end] {
			sb.WriteByte(l.op)
			sb.WriteString(l.text)
			sb.WriteByte('\n')
		}
		k = end
	}
	return sb.String()
}
