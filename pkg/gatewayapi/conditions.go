package gatewayapi

import (
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cond builds a condition; status true or false.
func cond(typ string, ok bool, reason, msg string, gen int64) metav1.Condition {
	st := metav1.ConditionTrue
	if !ok {
		st = metav1.ConditionFalse
	}
	return metav1.Condition{Type: typ, Status: st, Reason: reason, Message: msg, ObservedGeneration: gen}
}

// problem is why something is not accepted or not resolved: a reason the
// Gateway API defines and a message for people.
type problem struct {
	reason string
	msg    string
}

// add records a problem: the first reason wins, and messages of that
// reason are joined (each once).
func (p *problem) add(reason, msg string) {
	switch {
	case p.reason == "":
		p.reason, p.msg = reason, msg
	case p.reason == reason && !slices.Contains(strings.Split(p.msg, "; "), msg):
		p.msg += "; " + msg
	}
}
