package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ignoredPaths change on every write and say nothing about the object.
var ignoredPaths = []string{"metadata.resourceVersion", "metadata.managedFields", "metadata.generation"}

// shortDiff lists what changed between two JSON objects, one line per
// changed leaf ("~ spec.ports[0].port: 80 -> 8080", "+ path: v", "- path: v"),
// at most max lines (then a count of the rest).
func shortDiff(old, cur []byte, max int) []string {
	var a, b any
	if json.Unmarshal(old, &a) != nil || json.Unmarshal(cur, &b) != nil {
		return []string{"(not JSON)"}
	}
	la, lb := map[string]string{}, map[string]string{}
	flatten("", a, la)
	flatten("", b, lb)
	var paths []string
	for p := range la {
		paths = append(paths, p)
	}
	for p := range lb {
		if _, ok := la[p]; !ok {
			paths = append(paths, p)
		}
	}
	slices.Sort(paths)
	var out []string
	for _, p := range paths {
		if ignored(p) {
			continue
		}
		va, ina := la[p]
		vb, inb := lb[p]
		switch {
		case ina && inb && va != vb:
			out = append(out, fmt.Sprintf("~ %s: %s -> %s", p, clip(va), clip(vb)))
		case ina && !inb:
			out = append(out, fmt.Sprintf("- %s: %s", p, clip(va)))
		case !ina && inb:
			out = append(out, fmt.Sprintf("+ %s: %s", p, clip(vb)))
		}
	}
	if len(out) > max {
		out = append(out[:max:max], fmt.Sprintf("... and %d more", len(out)-max))
	}
	return out
}

func ignored(p string) bool {
	for _, i := range ignoredPaths {
		if p == i || strings.HasPrefix(p, i+".") || strings.HasPrefix(p, i+"[") {
			return true
		}
	}
	return false
}

// flatten maps every leaf of v (and every empty object or list) to its JSON.
func flatten(path string, v any, out map[string]string) {
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			out[path] = "{}"
		}
		for k, e := range x {
			p := k
			if path != "" {
				p = path + "." + k
			}
			flatten(p, e, out)
		}
	case []any:
		if len(x) == 0 {
			out[path] = "[]"
		}
		for i, e := range x {
			flatten(path+"["+strconv.Itoa(i)+"]", e, out)
		}
	default:
		b, _ := json.Marshal(x)
		out[path] = string(b)
	}
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}
