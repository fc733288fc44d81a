package manifest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Object is one valid Kubernetes-style object found in a manifest file.
type Object struct {
	// Group is the API group, empty for the core group.
	Group string
	// Version is the API version without the group ("v1").
	Version   string
	Kind      string
	Namespace string
	Name      string
	// UID is metadata.uid when the manifest sets it.
	UID string
	// JSON is the object as canonical JSON: keys sorted, no insignificant
	// space, numbers as written, metadata.namespace defaulted.
	JSON []byte
	// Doc is the index of the document in the file, from 0, counting only
	// documents that are not blank.
	Doc int
	// Item is the index in the items of a List document, or -1.
	Item int
	// Line is the 1-based line where the document starts.
	Line int
}

// Location is "<file>#<doc>" or, for an item of a List, "<file>#<doc>/items/<i>".
func (o *Object) Location(file string) string { return location(file, o.Doc, o.Item) }

func location(file string, doc, item int) string {
	if item < 0 {
		return file + "#" + strconv.Itoa(doc)
	}
	return file + "#" + strconv.Itoa(doc) + "/items/" + strconv.Itoa(item)
}

// Reason classifies a bad document; it is a bounded metric label.
type Reason string

// Reasons a document is rejected.
const (
	ReasonMalformed         Reason = "malformed_yaml"
	ReasonNotAnObject       Reason = "not_an_object"
	ReasonMissingAPIVersion Reason = "missing_api_version"
	ReasonInvalidAPIVersion Reason = "invalid_api_version"
	ReasonMissingKind       Reason = "missing_kind"
	ReasonMissingName       Reason = "missing_name"
	ReasonInvalidMetadata   Reason = "invalid_metadata"
	ReasonInvalidName       Reason = "invalid_name"
	ReasonNestedList        Reason = "nested_list"
	ReasonUnreadableFile    Reason = "unreadable_file"
	ReasonFileTooLarge      Reason = "file_too_large"
)

// Error is one rejected document (or List item).
type Error struct {
	File   string
	Doc    int
	Item   int // -1 unless the error is in an item of a List
	Line   int // 1-based line of the document (or of the YAML error)
	Reason Reason
	Err    error
}

func (e *Error) Error() string {
	loc := location(e.File, e.Doc, e.Item)
	if e.Line > 0 {
		return fmt.Sprintf("%s (line %d): %s: %v", loc, e.Line, e.Reason, e.Err)
	}
	return fmt.Sprintf("%s: %s: %v", loc, e.Reason, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Parse reads every document of one manifest file. file names the file in
// errors only. Bad documents are returned as errors; the good ones of the
// same file are returned as objects, in file order.
func Parse(file string, data []byte) ([]Object, []*Error) {
	var (
		objs []Object
		errs []*Error
	)
	for _, d := range splitDocuments(data) {
		fail := func(item, line int, r Reason, err error) {
			errs = append(errs, &Error{File: file, Doc: d.index, Item: item, Line: line, Reason: r, Err: err})
		}
		raw, err := yaml.YAMLToJSONStrict(d.text)
		if err != nil {
			line, msg := yamlErrorLine(err, d.line)
			fail(-1, line, ReasonMalformed, errors.New(msg))
			continue
		}
		var v any
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			fail(-1, d.line, ReasonMalformed, err)
			continue
		}
		if v == nil { // "null", "~": nothing to record
			continue
		}
		m, ok := v.(map[string]any)
		if !ok {
			fail(-1, d.line, ReasonNotAnObject, fmt.Errorf("document is a %s, want a mapping", jsonType(v)))
			continue
		}
		if items, ok := listItems(m); ok {
			for i, it := range items {
				im, ok := it.(map[string]any)
				if !ok {
					fail(i, d.line, ReasonNotAnObject, fmt.Errorf("list item is a %s, want a mapping", jsonType(it)))
					continue
				}
				if _, nested := listItems(im); nested {
					fail(i, d.line, ReasonNestedList, errors.New("a List inside a List is not supported"))
					continue
				}
				o, r, err := object(im)
				if err != nil {
					fail(i, d.line, r, err)
					continue
				}
				o.Doc, o.Item, o.Line = d.index, i, d.line
				objs = append(objs, o)
			}
			continue
		}
		o, r, err := object(m)
		if err != nil {
			fail(-1, d.line, r, err)
			continue
		}
		o.Doc, o.Item, o.Line = d.index, -1, d.line
		objs = append(objs, o)
	}
	return objs, errs
}

// listItems returns the items of a "kind: List" (or "kind: <X>List" with an
// items array, as kubectl get -o yaml writes).
func listItems(m map[string]any) ([]any, bool) {
	kind, _ := m["kind"].(string)
	if !strings.HasSuffix(kind, "List") {
		return nil, false
	}
	items, ok := m["items"]
	if !ok || items == nil {
		return nil, kind == "List"
	}
	arr, ok := items.([]any)
	if !ok {
		return nil, false
	}
	return arr, true
}

// object validates one object, defaults its namespace and renders its
// canonical JSON.
func object(m map[string]any) (Object, Reason, error) {
	var o Object
	av, ok := m["apiVersion"].(string)
	if !ok || av == "" {
		return o, ReasonMissingAPIVersion, errors.New("apiVersion is missing or not a string")
	}
	group, version, ok := splitAPIVersion(av)
	if !ok {
		return o, ReasonInvalidAPIVersion, fmt.Errorf("apiVersion %q is not <version> or <group>/<version>", av)
	}
	kind, ok := m["kind"].(string)
	if !ok || kind == "" {
		return o, ReasonMissingKind, errors.New("kind is missing or not a string")
	}
	md, ok := m["metadata"].(map[string]any)
	if !ok {
		return o, ReasonMissingName, errors.New("metadata is missing or not a mapping")
	}
	name, ok := md["name"].(string)
	if !ok || name == "" {
		return o, ReasonMissingName, errors.New("metadata.name is missing or not a string")
	}
	ns := ""
	if v, present := md["namespace"]; present && v != nil {
		s, ok := v.(string)
		if !ok {
			return o, ReasonInvalidMetadata, errors.New("metadata.namespace is not a string")
		}
		ns = s
	}
	uid := ""
	if v, present := md["uid"]; present && v != nil {
		s, ok := v.(string)
		if !ok {
			return o, ReasonInvalidMetadata, errors.New("metadata.uid is not a string")
		}
		uid = s
	}
	if err := validateName(group, kind, name); err != nil {
		return o, ReasonInvalidName, err
	}
	if ns != "" {
		if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
			return o, ReasonInvalidName, fmt.Errorf("metadata.namespace %q: %s", ns, strings.Join(errs, "; "))
		}
	}
	switch ScopeOf(group, kind) {
	case Namespaced:
		if ns == "" {
			ns = DefaultNamespace
			md["namespace"] = ns
		}
	case ClusterScoped:
		ns = ""
		delete(md, "namespace")
	case UnknownScope:
		// Custom resources: the scope is in a CRD we do not read; keep
		// what the manifest says.
	}
	js, err := canonicalJSON(m)
	if err != nil {
		return o, ReasonMalformed, err
	}
	return Object{Group: group, Version: version, Kind: kind, Namespace: ns, Name: name, UID: uid, JSON: js}, "", nil
}

// validateName checks metadata.name as the API server would for the kind:
// Services and Namespaces are DNS labels (RFC 1035 and 1123), RBAC objects
// path segments (so "system:..." names pass), everything else a DNS-1123
// subdomain (at most 253 bytes). An object the API server would refuse is
// refused here too, and so nothing unbounded reaches a subject.
func validateName(group, kind, name string) error {
	var errs []string
	switch {
	case group == "" && kind == "Service":
		errs = validation.IsDNS1035Label(name)
	case group == "" && kind == "Namespace":
		errs = validation.IsDNS1123Label(name)
	case group == "rbac.authorization.k8s.io":
		errs = content.IsPathSegmentName(name)
		if len(name) > validation.DNS1123SubdomainMaxLength {
			errs = append(errs, validation.MaxLenError(validation.DNS1123SubdomainMaxLength))
		}
	default:
		errs = validation.IsDNS1123Subdomain(name)
	}
	if len(errs) == 0 {
		return nil
	}
	shown := name
	if len(shown) > 64 {
		shown = shown[:64] + "..."
	}
	return fmt.Errorf("metadata.name %q (%d bytes) is not a valid %s name: %s", shown, len(name), kind, strings.Join(errs, "; "))
}

func splitAPIVersion(av string) (group, version string, ok bool) {
	g, v, found := strings.Cut(av, "/")
	if !found {
		return "", av, true
	}
	if g == "" || v == "" || strings.Contains(v, "/") {
		return "", "", false
	}
	return g, v, true
}

// canonicalJSON renders v with sorted keys (encoding/json sorts map keys),
// without HTML escaping and without a trailing newline.
func canonicalJSON(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("render json: %w", err)
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func jsonType(v any) string {
	switch v.(type) {
	case []any:
		return "sequence"
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "boolean"
	default:
		return fmt.Sprintf("%T", v)
	}
}

var yamlLineRE = regexp.MustCompile(`line (\d+)`)

// yamlErrorLine rewrites the document-relative "line N" of a YAML error to
// the file's line numbering and returns that line (or the document's).
func yamlErrorLine(err error, docLine int) (int, string) {
	msg := err.Error()
	loc := yamlLineRE.FindStringSubmatchIndex(msg)
	if loc == nil {
		return docLine, msg
	}
	n, convErr := strconv.Atoi(msg[loc[2]:loc[3]])
	if convErr != nil {
		return docLine, msg
	}
	abs := docLine + n - 1
	return abs, msg[:loc[2]] + strconv.Itoa(abs) + msg[loc[3]:]
}
