// Package yamldir reads a directory of Kubernetes manifests the way the
// ingest service does (its manifest parser, the same file filter) and
// turns what changed into change records, so that the go-control-plane
// baseline and the harness's expected configuration are built by
// pkg/model and pkg/xdsgen from exactly what pilotwire's ingest reads.
package yamldir

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cespare/xxhash/v2"

	"github.com/pilotwire/pilotwire/pkg/model"
	pb "github.com/pilotwire/pilotwire/proto/pilotwire/v1"
	"github.com/pilotwire/pilotwire/services/ingest/manifest"
)

// Key names one object.
type Key struct{ Group, Kind, Namespace, Name string }

type object struct {
	version string // API version without group
	uid     string
	json    []byte
}

// Dir follows the objects of one directory, file by file. The first file
// in path order wins when two define the same object. Not safe for
// concurrent use.
type Dir struct {
	root    string
	cluster string
	files   map[string]map[Key]object // relative path -> its objects
	current map[Key]object            // merged view last returned
}

// New returns a Dir for root whose records carry cluster id cluster. It
// reads nothing until Scan.
func New(root, cluster string) *Dir {
	return &Dir{root: root, cluster: cluster, files: make(map[string]map[Key]object), current: make(map[Key]object)}
}

// IsManifest reports whether a path names a manifest: *.yaml, *.yml or
// *.json, with no hidden path component.
func IsManifest(rel string) bool {
	for _, part := range strings.Split(filepath.ToSlash(rel), "/") {
		if strings.HasPrefix(part, ".") {
			return false
		}
	}
	switch strings.ToLower(filepath.Ext(rel)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// Scan reads every manifest under the root and returns the records that
// take the previous view to the new one (adds only, on the first call).
// Invalid documents are returned as errors and skipped.
func (d *Dir) Scan() ([]*pb.ChangeRecord, []error) {
	var rels []string
	err := filepath.WalkDir(d.root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(d.root, p)
		if e.IsDir() {
			if rel != "." && strings.HasPrefix(e.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		if IsManifest(rel) {
			rels = append(rels, rel)
		}
		return nil
	})
	if err != nil {
		return nil, []error{fmt.Errorf("scan %s: %w", d.root, err)}
	}
	// Files that vanished are re-read too, which drops them.
	for rel := range d.files {
		if !slices.Contains(rels, rel) {
			rels = append(rels, rel)
		}
	}
	return d.Reload(rels)
}

// Reload re-reads the named files (relative to the root; missing files
// are dropped) and returns the records that take the previous view to the
// new one.
func (d *Dir) Reload(rels []string) ([]*pb.ChangeRecord, []error) {
	var errs []error
	for _, rel := range rels {
		if !IsManifest(rel) {
			continue
		}
		data, err := os.ReadFile(filepath.Join(d.root, rel))
		if errors.Is(err, fs.ErrNotExist) {
			delete(d.files, rel)
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("read %s: %w", rel, err))
			continue
		}
		objs, perrs := manifest.Parse(rel, data)
		for _, e := range perrs {
			errs = append(errs, e)
		}
		m := make(map[Key]object, len(objs))
		for _, o := range objs {
			k := Key{Group: o.Group, Kind: o.Kind, Namespace: o.Namespace, Name: o.Name}
			if _, dup := m[k]; !dup {
				m[k] = object{version: o.Version, uid: o.UID, json: o.JSON}
			}
		}
		d.files[rel] = m
	}
	return d.diff(), errs
}

// diff merges the files and returns the records from the last view to it.
func (d *Dir) diff() []*pb.ChangeRecord {
	merged := make(map[Key]object, len(d.current))
	paths := make([]string, 0, len(d.files))
	for rel := range d.files {
		paths = append(paths, rel)
	}
	slices.Sort(paths)
	for _, rel := range paths {
		for k, o := range d.files[rel] {
			if _, taken := merged[k]; !taken {
				merged[k] = o
			}
		}
	}
	var recs []*pb.ChangeRecord
	for k, o := range merged {
		old, ok := d.current[k]
		switch {
		case !ok:
			recs = append(recs, d.record(k, o, pb.Op_OP_ADD))
		case string(old.json) != string(o.json) || old.version != o.version:
			recs = append(recs, d.record(k, o, pb.Op_OP_UPDATE))
		}
	}
	for k, o := range d.current {
		if _, ok := merged[k]; !ok {
			recs = append(recs, d.record(k, o, pb.Op_OP_DELETE))
		}
	}
	d.current = merged
	// Stable order: the model's result does not depend on it, but logs and
	// tests are easier to read.
	slices.SortFunc(recs, func(a, b *pb.ChangeRecord) int {
		return strings.Compare(refString(a.GetRef()), refString(b.GetRef()))
	})
	return recs
}

func refString(r *pb.ObjectRef) string {
	return r.GetGroup() + "/" + r.GetKind() + "/" + r.GetNamespace() + "/" + r.GetName()
}

func (d *Dir) record(k Key, o object, op pb.Op) *pb.ChangeRecord {
	uid := o.uid
	if uid == "" {
		uid = "file-" + k.Group + "-" + k.Kind + "-" + k.Namespace + "-" + k.Name
	}
	var sum [8]byte
	h := xxhash.Sum64(o.json)
	for i := range sum {
		sum[i] = byte(h >> (8 * i))
	}
	return &pb.ChangeRecord{
		Cluster:         d.cluster,
		Ref:             &pb.ObjectRef{Group: k.Group, Version: o.version, Kind: k.Kind, Namespace: k.Namespace, Name: k.Name},
		Op:              op,
		Uid:             uid,
		ResourceVersion: hex.EncodeToString(sum[:]),
		Object:          o.json,
	}
}

// Apply applies records to store in order, each with the next sequence,
// and returns the first error other than a record the model rejects
// (those are counted in bad).
func Apply(store *model.Store, recs []*pb.ChangeRecord) (bad int, err error) {
	for _, r := range recs {
		seq := store.AppliedSeq() + 1
		if err := store.Apply(r, seq); err != nil {
			if errors.Is(err, model.ErrAlreadyApplied) {
				return bad, err
			}
			bad++
		}
	}
	return bad, nil
}

// Load reads a directory into a fresh model store.
func Load(root, cluster string) (*model.Store, error) {
	d := New(root, cluster)
	recs, errs := d.Scan()
	if len(errs) > 0 {
		return nil, fmt.Errorf("read %s: %w", root, errors.Join(errs...))
	}
	store := model.NewStore()
	bad, err := Apply(store, recs)
	if err != nil {
		return nil, err
	}
	if bad > 0 {
		return nil, fmt.Errorf("read %s: the model rejected %d objects", root, bad)
	}
	return store, nil
}
