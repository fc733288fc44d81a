// Package debouncer is the pilotwire service that merges change records into
// PushRequests with Istio's debounce semantics (pkg/debounce holds the pure
// state machine; this package is the NATS shell around it).
//
// It reads the CHANGES stream with a durable consumer, acknowledges a change
// only after the PushRequest that includes it is durably in the PUSHES
// stream, and on restart skips redelivered changes the last PushRequest
// already covers, so nothing is lost and nothing is counted twice.
package debouncer
