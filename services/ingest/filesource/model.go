package filesource

import (
	"slices"

	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

// fileObjects are the objects one file defines, by key.
type fileObjects map[publish.Key]publish.Object

// model is the directory's object set: which file defines which object, and
// which definition wins. It is pure: reading files and publishing are the
// source's job.
type model struct {
	files map[string]fileObjects
	// owners lists, per key, the files defining it, sorted: the first wins.
	owners map[publish.Key][]string
}

func newModel() *model {
	return &model{files: make(map[string]fileObjects), owners: make(map[publish.Key][]string)}
}

// winner is the effective definition of k.
func (m *model) winner(k publish.Key) (publish.Object, bool) {
	files := m.owners[k]
	if len(files) == 0 {
		return publish.Object{}, false
	}
	return m.files[files[0]][k], true
}

// duplicate is a key defined in more than one file.
type duplicate struct {
	key   publish.Key
	files []string // sorted; files[0] wins
}

// update replaces the objects of the given files (nil: the file is gone)
// and returns the net changes of the effective set, sorted by key, and the
// keys of these files that other files define too.
func (m *model) update(files map[string]fileObjects) ([]publish.Change, []duplicate) {
	affected := make(map[publish.Key]struct{})
	for rel, objs := range files {
		for k := range m.files[rel] {
			affected[k] = struct{}{}
		}
		for k := range objs {
			affected[k] = struct{}{}
		}
	}
	before := make(map[publish.Key]publish.Object, len(affected))
	for k := range affected {
		if o, ok := m.winner(k); ok {
			before[k] = o
		}
	}
	for rel, objs := range files {
		for k := range m.files[rel] {
			m.removeOwner(k, rel)
		}
		if objs == nil {
			delete(m.files, rel)
			continue
		}
		m.files[rel] = objs
		for k := range objs {
			m.addOwner(k, rel)
		}
	}
	keys := make([]publish.Key, 0, len(affected))
	for k := range affected {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, publish.CompareKeys)
	var (
		changes []publish.Change
		dups    []duplicate
	)
	for _, k := range keys {
		old, had := before[k]
		cur, has := m.winner(k)
		switch {
		case has && (!had || old.ResourceVersion != cur.ResourceVersion || old.UID != cur.UID):
			changes = append(changes, publish.Upsert(cur))
		case had && !has:
			changes = append(changes, publish.Delete(old))
		}
		if owners := m.owners[k]; len(owners) > 1 {
			dups = append(dups, duplicate{key: k, files: slices.Clone(owners)})
		}
	}
	return changes, dups
}

// desired is the effective object set, sorted by key.
func (m *model) desired() []publish.Object {
	out := make([]publish.Object, 0, len(m.owners))
	for k := range m.owners {
		o, _ := m.winner(k)
		out = append(out, o)
	}
	slices.SortFunc(out, func(a, b publish.Object) int { return publish.CompareKeys(a.Key, b.Key) })
	return out
}

// filesUnder lists the known files at or below dir ("" is the root).
func (m *model) filesUnder(dir string) []string {
	var out []string
	for rel := range m.files {
		if under(rel, dir) {
			out = append(out, rel)
		}
	}
	return out
}

func (m *model) addOwner(k publish.Key, rel string) {
	files := m.owners[k]
	i, found := slices.BinarySearch(files, rel)
	if !found {
		m.owners[k] = slices.Insert(files, i, rel)
	}
}

func (m *model) removeOwner(k publish.Key, rel string) {
	files := m.owners[k]
	i, found := slices.BinarySearch(files, rel)
	if !found {
		return
	}
	files = slices.Delete(files, i, i+1)
	if len(files) == 0 {
		delete(m.owners, k)
		return
	}
	m.owners[k] = files
}

// under reports whether rel is dir or inside it ("" is the root).
func under(rel, dir string) bool {
	if dir == "" || rel == dir {
		return true
	}
	return len(rel) > len(dir) && rel[len(dir)] == '/' && rel[:len(dir)] == dir
}
