package kubesource

import (
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/pilotwire/pilotwire/pkg/gatewayapi"
)

// decoded is an object from an informer store and its typed form.
type decoded[T any] struct {
	u   *unstructured.Unstructured
	obj *T
}

// serviceEntry is the part of a ServiceEntry the conversion reads.
type serviceEntry struct {
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Hosts []string `json:"hosts"`
	} `json:"spec"`
}

// decodeAll decodes a resource's store by "<namespace>/<name>". An object
// that does not decode is logged and left out (its status is not written).
func decodeAll[T any](w *statusWriter, gk schema.GroupKind) map[string]decoded[T] {
	store := w.store(gk)
	if store == nil {
		return nil
	}
	out := make(map[string]decoded[T])
	for _, o := range store.List() {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var obj T
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &obj); err != nil {
			w.log.Warn("cannot decode; its status is not written", "kind", kindLabel(gk),
				"namespace", u.GetNamespace(), "name", u.GetName(), "err", err)
			continue
		}
		out[u.GetNamespace()+"/"+u.GetName()] = decoded[T]{u: u, obj: &obj}
	}
	return out
}

// routeStatuses picks the route status of each decoded route.
func routeStatuses[T any](in map[string]decoded[T], status func(*T) gwv1.RouteStatus) map[string]decoded[gwv1.RouteStatus] {
	out := make(map[string]decoded[gwv1.RouteStatus], len(in))
	for k, o := range in {
		st := status(o.obj)
		out[k] = decoded[gwv1.RouteStatus]{u: o.u, obj: &st}
	}
	return out
}

// mergeConditions returns want with each condition's lastTransitionTime
// kept from cur while its status is unchanged, else now.
func mergeConditions(cur, want []metav1.Condition, now metav1.Time) []metav1.Condition {
	out := make([]metav1.Condition, len(want))
	for i, c := range want {
		c.LastTransitionTime = now
		if old := meta.FindStatusCondition(cur, c.Type); old != nil && old.Status == c.Status {
			c.LastTransitionTime = old.LastTransitionTime
		}
		out[i] = c
	}
	return out
}

// mergeGatewayStatus is cur with the computed conditions and listeners
// (addresses kept).
func mergeGatewayStatus(cur, want gwv1.GatewayStatus, now metav1.Time) gwv1.GatewayStatus {
	out := *cur.DeepCopy()
	out.Conditions = mergeConditions(cur.Conditions, want.Conditions, now)
	out.Listeners = make([]gwv1.ListenerStatus, len(want.Listeners))
	for i, l := range want.Listeners {
		var old []metav1.Condition
		for _, c := range cur.Listeners {
			if c.Name == l.Name {
				old = c.Conditions
			}
		}
		l.Conditions = mergeConditions(old, l.Conditions, now)
		out.Listeners[i] = l
	}
	return out
}

// mergeRouteStatus is cur with this controller's parent entries replaced
// by ours: matching entries keep their place, the others of this
// controller go, new ones are appended; other controllers' entries stay.
func mergeRouteStatus(cur gwv1.RouteStatus, ours []gwv1.RouteParentStatus, now metav1.Time) gwv1.RouteStatus {
	used := make([]bool, len(ours))
	find := func(ref gwv1.ParentReference) int {
		for i, p := range ours {
			if !used[i] && equality.Semantic.DeepEqual(p.ParentRef, ref) {
				return i
			}
		}
		return -1
	}
	out := gwv1.RouteStatus{Parents: []gwv1.RouteParentStatus{}}
	for _, p := range cur.Parents {
		if p.ControllerName != gatewayapi.ControllerName {
			out.Parents = append(out.Parents, *p.DeepCopy())
			continue
		}
		if i := find(p.ParentRef); i >= 0 {
			used[i] = true
			np := *ours[i].DeepCopy()
			np.Conditions = mergeConditions(p.Conditions, np.Conditions, now)
			out.Parents = append(out.Parents, np)
		}
	}
	for i, p := range ours {
		if !used[i] {
			np := *p.DeepCopy()
			np.Conditions = mergeConditions(nil, np.Conditions, now)
			out.Parents = append(out.Parents, np)
		}
	}
	return out
}
