package model

// objectTopFields and objectMetaFields are what ObjectLabels reads.
var (
	objectTopFields  = []string{"metadata"}
	objectMetaFields = []string{"labels"}
)

// ObjectLabels returns the metadata.labels of a Kubernetes object's JSON
// exactly as encoding/json decodes them into a map[string]string (no
// labels: nil; "labels": {}: an empty map; a repeated label key: its last
// value), without decoding anything else. ok is false when this fast path
// does not take raw: escapes or non-ASCII in a key or a label, a null or
// repeated metadata or labels, a key that matches them only without
// regard to case, or anything but valid JSON. Decode raw with
// encoding/json then, which decides. FuzzObjectLabels holds the two
// equal.
func ObjectLabels(raw []byte) (labels map[string]string, ok bool) {
	s := jscan{b: raw}
	ok = s.fields(objectTopFields, func(int) bool {
		return s.fields(objectMetaFields, func(int) bool {
			var ok bool
			labels, ok = s.stringMap()
			return ok
		})
	}) && s.end()
	if !ok {
		return nil, false
	}
	return labels, true
}
