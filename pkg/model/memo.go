package model

import "sync"

// memo caches values computed from an immutable object, once per key. The
// zero value is ready to use.
type memo struct {
	mu      sync.Mutex // guards entries
	entries map[any]*memoEntry
}

type memoEntry struct {
	once sync.Once
	val  any
}

// get returns the value stored under key, calling build exactly once per key
// even when several goroutines ask at the same time. Callers asking for other
// keys do not wait for build.
func (m *memo) get(key any, build func() any) any {
	m.mu.Lock()
	e := m.entries[key]
	if e == nil {
		if m.entries == nil {
			m.entries = make(map[any]*memoEntry)
		}
		e = &memoEntry{}
		m.entries[key] = e
	}
	m.mu.Unlock()
	e.once.Do(func() { e.val = build() })
	return e.val
}
