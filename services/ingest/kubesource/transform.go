package kubesource

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
)

// lastAppliedAnnotation is kubectl's copy of the last applied object: as big
// as the object itself and of no use to the mesh.
const lastAppliedAnnotation = "kubectl.kubernetes.io/last-applied-configuration"

// transformFor returns the informer transform of kind gvk. It runs on every
// object before the informer stores it, so the store, and therefore every
// record, holds only what the mesh uses. Typed objects from a list or watch
// carry no apiVersion and kind; the transform sets them, so that a record's
// object is a complete Kubernetes object.
func transformFor(gvk schema.GroupVersionKind) cache.TransformFunc {
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case *corev1.Pod:
			return trimPod(o), nil
		case *corev1.Node:
			return trimNode(o), nil
		case *unstructured.Unstructured:
			unstructured.RemoveNestedField(o.Object, "metadata", "managedFields")
			if ann := o.GetAnnotations(); ann != nil {
				if _, ok := ann[lastAppliedAnnotation]; ok {
					delete(ann, lastAppliedAnnotation)
					o.SetAnnotations(nilIfEmpty(ann))
				}
			}
			return o, nil
		case runtime.Object:
			m, err := meta.Accessor(o)
			if err != nil {
				return obj, nil // not an object (a tombstone): leave it
			}
			stripMeta(m)
			o.GetObjectKind().SetGroupVersionKind(gvk)
			return o, nil
		}
		return obj, nil
	}
}

// stripMeta drops managedFields and the last-applied annotation.
func stripMeta(m metav1.Object) {
	m.SetManagedFields(nil)
	if ann := m.GetAnnotations(); ann != nil {
		if _, ok := ann[lastAppliedAnnotation]; ok {
			delete(ann, lastAppliedAnnotation)
			m.SetAnnotations(nilIfEmpty(ann))
		}
	}
}

func nilIfEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

// meshAnnotations keeps the annotations whose prefix belongs to Istio
// (sidecar.istio.io/..., proxy.istio.io/config, istio.io/rev, ...): the
// only pod annotations the mesh reads.
func meshAnnotations(in map[string]string) map[string]string {
	var out map[string]string
	for k, v := range in {
		prefix, _, ok := strings.Cut(k, "/")
		if !ok || !(prefix == "istio.io" || strings.HasSuffix(prefix, ".istio.io")) {
			continue
		}
		if out == nil {
			out = make(map[string]string)
		}
		out[k] = v
	}
	return out
}

// trimMeta keeps identity, labels, owners and deletion state.
func trimMeta(in *metav1.ObjectMeta, annotations map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:              in.Name,
		Namespace:         in.Namespace,
		UID:               in.UID,
		ResourceVersion:   in.ResourceVersion,
		CreationTimestamp: in.CreationTimestamp,
		DeletionTimestamp: in.DeletionTimestamp,
		Labels:            in.Labels,
		Annotations:       annotations,
		OwnerReferences:   in.OwnerReferences,
	}
}

// trimPod keeps what a mesh needs of a pod: identity, labels, owners, Istio
// annotations, node, service account, host networking, container ports (for
// named target ports), phase, IPs and readiness. Everything else (images,
// env, volumes, container statuses) changes often and would only grow the
// history.
func trimPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: trimMeta(&p.ObjectMeta, meshAnnotations(p.Annotations)),
		Spec: corev1.PodSpec{
			NodeName:           p.Spec.NodeName,
			ServiceAccountName: p.Spec.ServiceAccountName,
			HostNetwork:        p.Spec.HostNetwork,
		},
		Status: corev1.PodStatus{
			Phase:  p.Status.Phase,
			HostIP: p.Status.HostIP,
			PodIP:  p.Status.PodIP,
			PodIPs: p.Status.PodIPs,
		},
	}
	for _, c := range p.Spec.Containers {
		out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name, Ports: c.Ports})
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			out.Status.Conditions = []corev1.PodCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return out
}

// trimNode keeps a node's identity, labels (topology: region, zone,
// subzone, network) and addresses; not its status heartbeats, images or
// capacity.
func trimNode(n *corev1.Node) *corev1.Node {
	return &corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: trimMeta(&n.ObjectMeta, meshAnnotations(n.Annotations)),
		Status:     corev1.NodeStatus{Addresses: n.Status.Addresses},
	}
}

// trimCRD keeps what discovery reads of a CRD: group, kind, plural, scope,
// served versions and the Established condition; not the schemas, which
// are large.
func trimCRD(obj any) (any, error) {
	crd, ok := obj.(*apiextensionsv1.CustomResourceDefinition)
	if !ok {
		return obj, nil
	}
	out := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: trimMeta(&crd.ObjectMeta, nil),
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: crd.Spec.Group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: crd.Spec.Names.Kind, Plural: crd.Spec.Names.Plural},
			Scope: crd.Spec.Scope,
		},
	}
	for _, v := range crd.Spec.Versions {
		out.Spec.Versions = append(out.Spec.Versions, apiextensionsv1.CustomResourceDefinitionVersion{Name: v.Name, Served: v.Served, Storage: v.Storage})
	}
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established {
			out.Status.Conditions = []apiextensionsv1.CustomResourceDefinitionCondition{{Type: c.Type, Status: c.Status}}
		}
	}
	return out, nil
}

// sameExceptResourceVersion reports whether two stored (transformed)
// versions of an object differ only in their resourceVersion: a write that
// touched only managedFields, or only fields the transform dropped (a pod's
// container statuses, a node's heartbeat).
func sameExceptResourceVersion(a, b runtime.Object) bool {
	a, b = a.DeepCopyObject(), b.DeepCopyObject()
	ma, err1 := meta.Accessor(a)
	mb, err2 := meta.Accessor(b)
	if err1 != nil || err2 != nil {
		return false
	}
	ma.SetResourceVersion("")
	mb.SetResourceVersion("")
	return equality.Semantic.DeepEqual(a, b)
}
