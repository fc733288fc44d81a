// Package pushqueue is the pusher's per-connection work queue, with the
// semantics of Istio pilot's PushQueue plus the push throttle.
//
// Each connection (a string id) is in at most one of three states: idle,
// pending (in the FIFO, holding one merged request) or processing (handed
// out by Dequeue, not yet MarkDone). Requests for a connection never pile
// up: they merge into its pending request, or, while it is processing, into
// its processing slot, which goes back to the end of the FIFO on MarkDone.
// The queue is thus bounded by the number of connections, and a slow
// connection delays only itself.
//
// Dequeue hands out at most MaxInFlight connections at a time (Istio's
// PILOT_PUSH_THROTTLE, applied here instead of by a semaphore around the
// queue). Every wait is cancellable with a context. After ShutDown, Dequeue
// keeps handing out the remaining work, then returns ErrShutdown; Drain
// waits for that with a deadline.
//
// The Queue starts no goroutines; it is safe for concurrent use.
package pushqueue
