// Package intern keeps one copy of the strings many messages repeat: the
// resource names every sidecar of a fleet subscribes to, the versions and
// type URLs in every registry entry. A decoder that looks its strings up
// in a Table holds each once, however many messages carry it.
package intern

import (
	"sync"
	"unicode/utf8"
)

// Default bounds: a longer string is not kept, and the table starts over
// when full, so input of ever new strings costs what it would without the
// table, and the table holds at most about DefaultMaxStrings ×
// DefaultMaxLen bytes.
const (
	DefaultMaxStrings = 1 << 17
	DefaultMaxLen     = 256
)

// Table holds strings already seen. Its zero value is ready to use with
// the default bounds; it is safe for concurrent use.
type Table struct {
	// MaxStrings and MaxLen bound the table (0: the defaults). Set them
	// before first use.
	MaxStrings, MaxLen int

	mu      sync.RWMutex
	strings map[string]string // guarded by mu
}

// Len is how many strings the table holds.
func (t *Table) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.strings)
}

// Bytes returns b as a string: the table's copy, or a new one it keeps.
// It reports false, and keeps nothing, for bytes that are not UTF-8.
func (t *Table) Bytes(b []byte) (string, bool) {
	t.mu.RLock()
	s, ok := t.strings[string(b)] // no allocation for the lookup
	t.mu.RUnlock()
	if ok {
		return s, true
	}
	if !utf8.Valid(b) {
		return "", false
	}
	s = string(b)
	t.keep(s)
	return s, true
}

// String returns the table's copy of s, keeping s when it has none.
func (t *Table) String(s string) string {
	t.mu.RLock()
	k, ok := t.strings[s]
	t.mu.RUnlock()
	if ok {
		return k
	}
	t.keep(s)
	return s
}

func (t *Table) keep(s string) {
	maxLen, maxStrings := t.MaxLen, t.MaxStrings
	if maxLen <= 0 {
		maxLen = DefaultMaxLen
	}
	if maxStrings <= 0 {
		maxStrings = DefaultMaxStrings
	}
	if len(s) > maxLen {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.strings == nil {
		t.strings = make(map[string]string)
	}
	if len(t.strings) >= maxStrings {
		clear(t.strings)
	}
	t.strings[s] = s
}
