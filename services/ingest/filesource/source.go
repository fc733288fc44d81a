package filesource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/pilotwire/pilotwire/services/ingest/manifest"
	"github.com/pilotwire/pilotwire/services/ingest/publish"
)

// Sink receives the source's objects; *publish.Publisher is one.
type Sink interface {
	// Sync makes the stream hold exactly desired.
	Sync(ctx context.Context, desired []publish.Object) (publish.Result, error)
	// Apply publishes individual changes.
	Apply(ctx context.Context, changes ...publish.Change) (publish.Result, error)
	// Live lists the objects the stream holds for the cluster.
	Live() []publish.LiveObject
}

var _ Sink = (*publish.Publisher)(nil)

// DefaultQuiet is how long a path must stay quiet, by default, before it is
// read again.
const DefaultQuiet = 25 * time.Millisecond

// Options configure a Source. Zero values mean the defaults noted.
type Options struct {
	// Dir is the directory of manifests (required).
	Dir string
	// Quiet is how long a path must stay quiet before it is read again
	// (default DefaultQuiet: editors write in bursts well under it; a read
	// that still catches a half-written file is corrected by the next
	// event).
	Quiet time.Duration
	// MaxDelay caps the wait of a path that keeps changing (default 2s).
	MaxDelay time.Duration
	// MaxFileSize skips bigger files as invalid (default 32 MiB).
	MaxFileSize int64
	// Log receives the source's logs (default: discarded).
	Log *slog.Logger
	// Registerer receives the source's metrics (default: none).
	Registerer prometheus.Registerer
}

// Source watches a directory of manifests and feeds a Sink.
type Source struct {
	// set at construction
	sink    Sink
	opts    Options
	log     *slog.Logger
	metrics *metrics

	// owned by Run
	root    string
	watcher *fsnotify.Watcher
	model   *model
	pending *coalescer[target]
	dirs    map[string]struct{} // watched directories, relative ("" is root)
}

// target is what a file system event asks to read again.
type target struct {
	kind targetKind
	rel  string
}

type targetKind int

const (
	targetFile targetKind = iota // one file
	targetDir                    // every file at or below a directory
	targetAll                    // everything (overflow, ConfigMap swap)
)

// New returns a source; it does no I/O (see Run).
func New(sink Sink, o Options) (*Source, error) {
	if o.Dir == "" {
		return nil, errors.New("file source: directory is required")
	}
	if o.Quiet <= 0 {
		o.Quiet = DefaultQuiet
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = 2 * time.Second
	}
	if o.MaxFileSize <= 0 {
		o.MaxFileSize = 32 << 20
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return &Source{sink: sink, opts: o, log: o.Log, metrics: newMetrics(o.Registerer)}, nil
}

// Run scans the directory, hands the sink the complete object set (Sync),
// calls ready with the result, then follows changes until ctx ends. It
// returns nil when ctx ends, or an error if watching fails.
func (s *Source) Run(ctx context.Context, ready func(publish.Result)) error {
	root, err := filepath.Abs(s.opts.Dir)
	if err != nil {
		return fmt.Errorf("config dir %q: %w", s.opts.Dir, err)
	}
	st, err := os.Stat(root)
	if err != nil {
		return fmt.Errorf("config dir: %w", err)
	}
	if !st.IsDir() {
		return fmt.Errorf("config dir %s is not a directory", root)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch config dir: %w", err)
	}
	defer w.Close()
	s.root, s.watcher = root, w
	s.model = newModel()
	s.pending = newCoalescer[target](s.opts.Quiet, s.opts.MaxDelay)
	s.dirs = make(map[string]struct{})

	res, err := s.initial(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if ready != nil {
		ready(res)
	}
	return s.loop(ctx)
}

// initial reads every file and syncs the complete set.
func (s *Source) initial(ctx context.Context) (publish.Result, error) {
	start := time.Now()
	files, errs := walk(s.root, "", s.watch)
	for _, err := range errs {
		s.log.Warn("scanning config dir", "err", err)
	}
	var live map[string][]publish.LiveObject // by source file, read once if needed
	updates := make(map[string]fileObjects, len(files))
	for i, rr := range readAll(s.root, files, s.opts.MaxFileSize) {
		rel := files[i]
		if rr.gone {
			continue
		}
		var prev fileObjects
		if rr.fileErr != nil || len(rr.errs) > 0 {
			// Keep what this file defined before the restart, as the
			// stream remembers it, until the file is valid again.
			if live == nil {
				live = liveBySourceFile(s.sink.Live())
			}
			prev = placeholders(live[rel])
		}
		updates[rel] = s.objectsOf(rr, prev)
	}
	_, dups := s.model.update(updates)
	s.reportDuplicates(dups)
	s.metrics.files.Set(float64(len(s.model.files)))
	desired := s.model.desired()
	res, err := s.sink.Sync(ctx, desired)
	if err != nil {
		return res, fmt.Errorf("initial sync: %w", err)
	}
	s.log.Info("initial scan published", "dir", s.root, "files", len(s.model.files), "objects", len(desired),
		"published", res.Published, "unchanged", res.Unchanged, "deduplicated", res.Deduplicated,
		"rejected", res.Rejected, "took", time.Since(start).Round(time.Millisecond))
	return res, nil
}

func (s *Source) loop(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-s.watcher.Events:
			if !ok {
				return errors.New("file watcher closed")
			}
			s.onEvent(ev, time.Now())
		case err, ok := <-s.watcher.Errors:
			if !ok {
				return errors.New("file watcher closed")
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				s.log.Warn("file events overflowed; rescanning the config dir")
				s.pending.touch(target{kind: targetAll}, time.Now())
			} else {
				s.log.Warn("file watcher", "err", err)
			}
		case <-timer.C:
			// Take the events delivered meanwhile first: select picks at
			// random among ready cases, and the second half of a rename
			// may be waiting beside the timer.
			s.drainEvents()
			if err := s.flush(ctx, time.Now()); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}
		s.metrics.pending.Set(float64(s.pending.len()))
		if at, ok := s.pending.next(); ok {
			timer.Reset(max(0, time.Until(at)))
		} else {
			timer.Stop()
		}
	}
}

// onEvent turns one file system event into paths to read again.
func (s *Source) onEvent(ev fsnotify.Event, now time.Time) {
	rel, ok := s.rel(ev.Name)
	if !ok {
		return
	}
	s.log.Debug("file event", "path", rel, "op", ev.Op.String())
	if strings.HasPrefix(path.Base(rel), "..") {
		// A ConfigMap volume swapped its ..data link: every file may have
		// changed without an event of its own.
		s.pending.touch(target{kind: targetAll}, now)
		return
	}
	if hidden(rel) {
		return
	}
	if ev.Has(fsnotify.Create) {
		if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
			// Watch at once so that files created next raise events; the
			// directory is walked (and watched again, in case the watch
			// raced with a rename) when its timer fires.
			if err := s.watch(rel); err != nil {
				s.log.Warn("watching new directory", "dir", rel, "err", err)
			}
			s.pending.touch(target{kind: targetDir, rel: rel}, now)
			return
		}
	}
	if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
		if _, isDir := s.dirs[rel]; isDir {
			// Drop the watches of the whole subtree: after a rename the
			// kernel keeps watching the moved directories, and fsnotify
			// would go on reporting their events under the old names. The
			// walk when the timer fires watches whatever is there now.
			for d := range s.dirs {
				if under(d, rel) {
					_ = s.watcher.Remove(filepath.Join(s.root, filepath.FromSlash(d))) // may be gone already
					delete(s.dirs, d)
				}
			}
			s.pending.touch(target{kind: targetDir, rel: rel}, now)
			return
		}
	}
	if isManifest(rel) {
		s.pending.touch(target{kind: targetFile, rel: rel}, now)
	}
}

// drainEvents handles the file events already delivered, without waiting.
func (s *Source) drainEvents() {
	for {
		select {
		case ev, ok := <-s.watcher.Events:
			if !ok {
				return // the loop sees the closed channel next
			}
			s.onEvent(ev, time.Now())
		default:
			return
		}
	}
}

// flush reads the paths whose timer has fired, and publishes the difference.
func (s *Source) flush(ctx context.Context, now time.Time) error {
	// A little slack takes along paths due a moment later: the two halves
	// of a rename (an object moving between files) go out together.
	due := s.pending.popDue(now.Add(s.opts.Quiet / 4))
	if len(due) == 0 {
		return nil
	}
	if slices.ContainsFunc(due, func(t target) bool { return t.kind != targetFile }) {
		// A directory moved or removed: its other half (the new name)
		// may have been touched just now. Take every pending directory
		// along, so its objects move instead of being deleted and added.
		due = append(due, s.pending.popWhere(func(t target) bool { return t.kind != targetFile })...)
	}
	set := make(map[string]struct{})
	for _, t := range due {
		switch t.kind {
		case targetFile:
			set[t.rel] = struct{}{}
		case targetDir, targetAll:
			dir := t.rel // "" for targetAll
			found, errs := walk(s.root, dir, s.watch)
			for _, err := range errs {
				s.log.Warn("scanning config dir", "dir", dir, "err", err)
			}
			for _, rel := range found {
				set[rel] = struct{}{}
			}
			for _, rel := range s.model.filesUnder(dir) {
				set[rel] = struct{}{}
			}
		}
	}
	files := make([]string, 0, len(set))
	for rel := range set {
		files = append(files, rel)
	}
	slices.Sort(files)
	updates := make(map[string]fileObjects, len(files))
	for i, rr := range readAll(s.root, files, s.opts.MaxFileSize) {
		rel := files[i]
		prev, known := s.model.files[rel]
		if rr.gone && !known {
			continue
		}
		updates[rel] = s.objectsOf(rr, prev)
	}
	changes, dups := s.model.update(updates)
	s.reportDuplicates(dups)
	s.metrics.files.Set(float64(len(s.model.files)))
	if len(changes) == 0 {
		s.log.Debug("files read, nothing changed", "files", len(files))
		return nil
	}
	res, err := s.sink.Apply(ctx, changes...)
	if err != nil {
		return fmt.Errorf("publish file changes: %w", err)
	}
	s.log.Info("file changes published", "files", len(files), "changes", len(changes),
		"published", res.Published, "unchanged", res.Unchanged, "deduplicated", res.Deduplicated, "rejected", res.Rejected)
	return nil
}

// objectsOf applies the source's rules to one read of a file, given what the
// file defined before: nil when the file is gone, prev when it could not be
// read, its good documents plus prev's objects they lack when some documents
// are invalid, and its documents otherwise.
func (s *Source) objectsOf(rr readResult, prev fileObjects) fileObjects {
	if rr.gone {
		return nil
	}
	if rr.fileErr != nil {
		s.invalid(rr.fileErr)
		if prev == nil {
			return fileObjects{}
		}
		return prev
	}
	out := make(fileObjects, len(rr.objs)+len(prev))
	for i := range rr.objs {
		mo := &rr.objs[i]
		o := publish.Object{
			Key:             publish.Key{Group: mo.Group, Kind: mo.Kind, Namespace: mo.Namespace, Name: mo.Name},
			Version:         mo.Version,
			UID:             mo.UID,
			ResourceVersion: publish.ContentVersion(mo.JSON),
			JSON:            mo.JSON,
			Source:          "file:" + mo.Location(rr.rel),
		}
		if first, dup := out[o.Key]; dup {
			s.metrics.duplicates.Inc()
			s.log.Warn("object defined twice in one file; using the first", "file", rr.rel, "key", o.Key.String(),
				"first", first.Source, "ignored", o.Source)
			continue
		}
		out[o.Key] = o
	}
	for _, e := range rr.errs {
		s.invalid(e)
	}
	if len(rr.errs) > 0 {
		kept := 0
		for k, o := range prev {
			if _, ok := out[k]; !ok {
				out[k] = o
				kept++
			}
		}
		if kept > 0 {
			s.log.Warn("file has invalid documents; keeping the objects it defined before", "file", rr.rel, "kept", kept)
		}
	}
	return out
}

func (s *Source) invalid(e *manifest.Error) {
	s.metrics.invalid.WithLabelValues(string(e.Reason)).Inc()
	attrs := []any{"file", e.File, "doc", e.Doc, "reason", string(e.Reason), "err", e.Err.Error()}
	if e.Item >= 0 {
		attrs = append(attrs, "item", e.Item)
	}
	if e.Line > 0 {
		attrs = append(attrs, "line", e.Line)
	}
	s.log.Warn("skipping invalid manifest document", attrs...)
}

func (s *Source) reportDuplicates(dups []duplicate) {
	for _, d := range dups {
		s.metrics.duplicates.Inc()
		s.log.Warn("object defined in several files; using the lexically first", "key", d.key.String(),
			"winner", d.files[0], "ignored", strings.Join(d.files[1:], ","))
	}
}

// watch adds a directory (relative) to the watcher.
func (s *Source) watch(rel string) error {
	if err := s.watcher.Add(filepath.Join(s.root, filepath.FromSlash(rel))); err != nil {
		return fmt.Errorf("watch %s: %w", rel, err)
	}
	s.dirs[rel] = struct{}{}
	return nil
}

// rel makes an event path relative to the root, with forward slashes.
func (s *Source) rel(p string) (string, bool) {
	r, err := filepath.Rel(s.root, p)
	if err != nil || r == "." || r == ".." || strings.HasPrefix(r, ".."+string(filepath.Separator)) {
		return "", false
	}
	return filepath.ToSlash(r), true
}

// hidden reports whether any element of rel starts with ".".
func hidden(rel string) bool {
	for el := range strings.SplitSeq(rel, "/") {
		if strings.HasPrefix(el, ".") {
			return true
		}
	}
	return false
}

// liveBySourceFile groups live objects by the file their last record came from.
func liveBySourceFile(live []publish.LiveObject) map[string][]publish.LiveObject {
	out := make(map[string][]publish.LiveObject)
	for _, l := range live {
		if rel, ok := sourceFile(l.Source); ok {
			out[rel] = append(out[rel], l)
		}
	}
	return out
}

// sourceFile extracts the file of a "file:<rel>#<doc>" source.
func sourceFile(src string) (string, bool) {
	rest, ok := strings.CutPrefix(src, "file:")
	if !ok {
		return "", false
	}
	i := strings.LastIndexByte(rest, '#')
	if i < 0 {
		return "", false
	}
	return rest[:i], true
}

// placeholders stand for objects the stream holds from a file that cannot
// be parsed now: same key and resourceVersion (so nothing is published for
// them), no JSON (a later delete takes the last object from the stream).
func placeholders(live []publish.LiveObject) fileObjects {
	out := make(fileObjects, len(live))
	for _, l := range live {
		out[l.Key] = publish.Object{Key: l.Key, Version: l.Version, ResourceVersion: l.ResourceVersion, Source: l.Source}
	}
	return out
}

// Current is the directory's view of an object, for the publisher to plan
// after a conflict (publish.Options.Reread): the winning definition, or a
// delete. It reads the source's model and must be called from within the
// sink's Sync or Apply, which Run makes on its own goroutine.
func (s *Source) Current(k publish.Key) (publish.Change, bool) {
	if s.model == nil {
		return publish.Change{}, false
	}
	if o, ok := s.model.winner(k); ok {
		return publish.Upsert(o), true
	}
	return publish.Delete(publish.Object{Key: k}), true
}
