// Package filesource is ingest's source of objects from a directory of
// Kubernetes manifests (*.yaml, *.yml, *.json, recursively), watched with
// fsnotify.
//
// The source keeps, per file, the objects it defines. A burst of file
// system events on a file (an editor's write-temp-and-rename, a copy in
// progress) is coalesced by a short per-file timer; then the file is read
// again, the directory's effective object set is recomputed for the keys the
// file touches, and only the difference is handed to the sink (the
// publisher).
//
// Rules:
//   - A deleted file deletes its objects.
//   - A file with any invalid document, or that cannot be read, deletes
//     nothing: its good documents are applied, and the objects it defined
//     before and no longer parses are kept until the file is valid again. We
//     cannot tell a half-typed document from a removed one, and a typo must
//     not withdraw services from the mesh. After a restart the "objects it
//     defined before" are the live objects on the stream whose source is that
//     file.
//   - An object defined in several files (or twice in one file) is taken
//     from the lexically first path (the first document); the others are
//     reported as duplicates.
//   - Names starting with "." are ignored, except that an event on a name
//     starting with ".." rescans everything: that is how a Kubernetes
//     ConfigMap volume swaps its content (..data symlink).
//   - Symbolic links to files are followed; links to directories are not.
package filesource
