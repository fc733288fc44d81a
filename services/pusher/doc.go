// Package pusher is the pilotwire service that fans PushRequests out per
// connection, with Istio's PushQueue semantics (pkg/pushqueue holds the pure
// queue): each connection has at most one push in flight, later requests
// merge into it, and at most --push-throttle connections are processed at
// once.
//
// It knows the connections from the registry bucket the ADS frontends
// write, sends PushOrders to the frontend that holds each connection, and
// learns from PushDone reports when each is sent. It is level-triggered: a
// connection whose config reflects an older change sequence than the latest
// PushRequest is queued, whatever the reason it fell behind.
package pusher
