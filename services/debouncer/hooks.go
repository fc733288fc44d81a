package debouncer

import "context"

// testHooks let tests stop the active instance where faults matter. They
// are nil outside tests.
type testHooks struct {
	// afterConsumerDelete runs at take-over right after the old durable
	// consumer is deleted; an error stands for a crash or a lost lease
	// in that gap.
	afterConsumerDelete func() error
	// publishCtx runs before each PushRequest publish and returns the
	// context to publish with: a test blocks in it to pause the instance
	// with a request on its way out, and may return a context the lease
	// no longer cancels (the process was paused past its own checks).
	publishCtx func(ctx context.Context) context.Context
}
