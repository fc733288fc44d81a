package pusher

import (
	"hash/maphash"
	"slices"
	"sync"

	"github.com/pilotwire/pilotwire/pkg/intern"
)

// maxNameLists bounds the table of name lists; it starts over when full
// (connections keep the lists they hold, new ones are no longer shared).
const maxNameLists = 1 << 12

// nameList is one list of resource names as registry entries carry it,
// held once for every connection that watches exactly those names, with
// the scoping index built from it.
type nameList struct {
	names []string
	// eds is the index of the list as a connection's only load assignment
	// watch; built on first use, under the pusher's lock.
	eds *edsWatches
}

// nameLists holds one copy of each list of names that registry entries
// carry. Alike sidecars watch the same load assignments (every cluster of
// the mesh they see), so a fleet shares a few lists, and the index a push
// scopes each connection by is built once per list, not per connection.
// Its zero value is ready to use.
type nameLists struct {
	mu    sync.Mutex
	seed  maphash.Seed           // guarded by mu
	lists map[uint64][]*nameList // by hash of the names; guarded by mu
	n     int                    // lists held; guarded by mu
}

// intern returns the table's list equal to names. When there is none it
// keeps names as that list, each name first replaced by strs's copy: a
// list already held has its strings interned, so alike entries cost a
// hash of their names, not a lookup per name.
func (t *nameLists) intern(names []string, strs *intern.Table) *nameList {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.lists == nil {
		t.seed, t.lists = maphash.MakeSeed(), make(map[uint64][]*nameList)
	}
	var h maphash.Hash
	h.SetSeed(t.seed)
	for _, n := range names {
		h.WriteString(n)
		h.WriteByte(0) // lists that hash alike are told apart below
	}
	k := h.Sum64()
	for _, l := range t.lists[k] {
		if slices.Equal(l.names, names) {
			return l
		}
	}
	if t.n >= maxNameLists {
		clear(t.lists)
		t.n = 0
	}
	for i, n := range names {
		names[i] = strs.String(n)
	}
	l := &nameList{names: names}
	t.lists[k] = append(t.lists[k], l)
	t.n++
	return l
}
