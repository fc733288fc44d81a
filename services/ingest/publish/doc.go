// Package publish turns a source's view of Kubernetes objects into change
// records on the CHANGES stream, exactly once per change.
//
// A Publisher keeps, per object of its cluster, what the stream already
// says: the uid, resourceVersion, op and sequence of the subject's last
// record, read at Start with an ordered consumer that delivers the last
// message per subject. Sync compares a source's full desired set with it and
// publishes only what differs, plus deletes for objects that vanished while
// ingest was down; Apply does the same for individual changes. Any source
// (the YAML directory today, Kubernetes informers later) uses it the same way.
//
// Exactly once: every record carries a Nats-Msg-Id built from cluster, uid,
// resourceVersion, op and the subject's previous sequence, so JetStream drops
// a retry of a record it already stored; and a
// Nats-Expected-Last-Subject-Sequence header, so that a retry after the
// dedup window, or a second writer, cannot append a stale or duplicate
// record: such a publish fails, the publisher reads the subject's last
// record and either recognises its own record or re-plans the change.
//
// Order: one batch at a time, and within a batch at most one record per
// object in flight, so records of one object are stored in the order the
// source reported them.
package publish
