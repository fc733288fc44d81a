// Package snapshot keeps start-up bounded by the live set, not by the age
// of the mesh: a snapshot is the compacted set of the change stream's live
// objects (each one's last record, with its sequence, subject and content
// version) as of a sequence, stored as one object in the JetStream object
// store PW_SNAPSHOTS. A consumer (an ADS frontend, `pilotwire render
// --at`) loads the newest snapshot at or before the point it wants and
// replays only what the stream holds after it.
//
// One instance writes snapshots (the Snapshotter, under the lease
// "snapshot", run by the debouncer service) and compacts the stream: once
// a snapshot older than the retention window exists, the records at or
// below its sequence that no live object needs are purged (deleted
// subjects entirely, superseded records of live subjects), and older
// snapshots are removed. The stream then holds every live object's last
// record, plus the history of the window.
//
// With compact forms (Options.Model), each snapshot also gets a view for
// frontends: the same live records, a record's compact form standing in
// for the record where it has one (Store.ReadView; Read is the snapshot
// itself, which every other reader uses and frontends fall back to).
//
// Set is the pure core (records in, live set and purge plan out); the
// codec and the object store I/O are around it.
package snapshot
