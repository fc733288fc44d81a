package ads

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Limits a frontend puts on each stream, so one hostile or broken client
// costs only itself; zero disables each. See Config.
type streamLimits struct {
	maxNames     int
	requestRate  float64
	requestBurst int
	sendTimeout  time.Duration
}

// shedError ends a stream because of what its client did: the gRPC status
// it ends with and the reason it is counted under.
type shedError struct {
	reason string
	st     *status.Status
}

func (e *shedError) Error() string { return e.st.Err().Error() }

// GRPCStatus makes the stream end with the shed status.
func (e *shedError) GRPCStatus() *status.Status { return e.st }

// shed is the error that ends a stream for reason with code.
func shed(code codes.Code, reason, format string, args ...any) error {
	return &shedError{reason: reason, st: status.New(code, fmt.Sprintf(format, args...))}
}

// noteShed counts and logs a stream ended by its client's behaviour; other
// errors pass unchanged.
func (c *conn) noteShed(err error) error {
	var se *shedError
	if errors.As(err, &se) {
		c.s.metrics.shed.WithLabelValues(se.reason).Inc()
		node := ""
		if c.proxy != nil {
			node = c.proxy.ID
		}
		c.log.Warn("stream shed", "reason", se.reason, "code", se.st.Code().String(), "node", node, "err", se.st.Message())
	}
	return err
}

// maxTypeURL bounds a type URL's length: the longest Envoy type is well
// under it.
const maxTypeURL = 256

// wellFormedType reports whether t looks like a type URL at all
// (type.googleapis.com/<message name>).
func wellFormedType(t string) bool {
	name, ok := strings.CutPrefix(t, "type.googleapis.com/")
	if !ok || name == "" || len(t) > maxTypeURL {
		return false
	}
	for _, r := range name {
		if !(r == '.' || r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// issued reports whether this stream sent a response with nonce. Nonces
// are <conn id>-<n in base 36>, n counting the stream's responses.
func (c *conn) issued(nonce string) bool {
	rest, ok := strings.CutPrefix(nonce, c.id+"-")
	if !ok {
		return false
	}
	n, err := strconv.ParseUint(rest, 36, 64)
	return err == nil && n >= 1 && n <= c.nonceSeq && strconv.FormatUint(n, 36) == rest
}

// checkNonce tells a stale nonce (one this stream sent, since superseded:
// ignored and counted, as Istio does) from a forged one (never sent on this
// stream: the stream ends).
func (c *conn) checkNonce(w *watch, nonce string) (stale bool, err error) {
	if nonce == "" || nonce == w.nonce {
		return false, nil
	}
	if !c.issued(nonce) {
		c.s.metrics.badRequests.WithLabelValues("forged_nonce").Inc()
		return false, shed(codes.InvalidArgument, "forged_nonce", "response_nonce %.64q was never sent on this stream", nonce)
	}
	c.s.metrics.expiredNonce.WithLabelValues(shortType(w.typeURL)).Inc()
	return true, nil
}

// checkNames ends a stream that watches more names of one type than the
// limit allows.
func (c *conn) checkNames(typeURL string, n int) error {
	if lim := c.s.limits.maxNames; lim > 0 && n > lim {
		c.s.metrics.badRequests.WithLabelValues("too_many_names").Inc()
		return shed(codes.ResourceExhausted, "too_many_names", "%d %s resource names on one stream; this frontend serves at most %d (--max-resource-names)", n, shortType(typeURL), lim)
	}
	return nil
}

// sendTimed runs send (one Send on the stream), ending the stream when the
// client's transport does not take the response within the send timeout:
// a client that stops reading fills its flow-control window and would
// otherwise hold this connection's loop, and every push order for it,
// forever. On a timeout the send goroutine stays blocked until the handler
// returns, which cancels the stream and so ends it.
func (c *conn) sendTimed(send func() error) error {
	d := c.s.limits.sendTimeout
	if d <= 0 {
		return send()
	}
	done := make(chan error, 1)
	go func() { done <- send() }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return shed(codes.DeadlineExceeded, "send_timeout", "the client took no response for %s (--xds-send-timeout): stream closed", d)
	case <-c.ctx.Done():
		return <-done
	}
}
