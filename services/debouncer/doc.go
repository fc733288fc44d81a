// Package debouncer is the pilotwire service that merges change records into
// PushRequests with Istio's debounce semantics (pkg/debounce holds the pure
// state machine; this package is the NATS shell around it).
//
// It reads the CHANGES stream with a durable consumer, acknowledges a change
// only after the PushRequest that includes it is durably in the PUSHES
// stream, and on restart skips redelivered changes the last PushRequest
// already covers, so nothing is lost and nothing is counted twice. Its
// publishes are fenced with the PUSHES stream's expected last sequence, so
// a paused ex-holder cannot add a request after a newer holder's; each
// request is size-bounded (size.go) and records the floor a next holder
// starts from (complete_through_seq). docs/architecture.md has the rules.
package debouncer
