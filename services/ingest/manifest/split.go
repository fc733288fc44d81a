package manifest

import "bytes"

// document is one chunk of a multi-document file.
type document struct {
	// index counts the non-blank documents of the file, from 0.
	index int
	// line is the 1-based line of the file where the document's text starts.
	line int
	text []byte
}

// splitDocuments cuts data at YAML document markers: a line that starts
// with "---" (followed by nothing, blanks or more content) or a "..." line.
// Chunks holding only blanks, comments or directives are dropped and take no
// index, so a file that opens with "---" numbers its first object 0.
//
// Splitting before parsing keeps a syntax error local to its document: the
// other documents of the file still parse.
func splitDocuments(data []byte) []document {
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // UTF-8 BOM
	var (
		docs  []document
		cur   []byte
		start = 1 // line where cur starts
		line  = 0
	)
	flush := func() {
		if !blank(cur) {
			docs = append(docs, document{index: len(docs), line: start, text: cur})
		}
		cur = nil
	}
	for len(data) > 0 {
		line++
		var l []byte
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			l, data = data[:i+1], data[i+1:]
		} else {
			l, data = data, nil
		}
		content := bytes.TrimRight(l, "\r\n")
		switch {
		case isMarker(content, "---"):
			flush()
			start = line
			// "--- {a: b}" or "--- |": the rest of the line opens the document.
			if rest := bytes.TrimLeft(content[3:], " \t"); len(rest) > 0 {
				cur = append(cur, rest...)
				cur = append(cur, '\n')
			} else {
				start = line + 1
			}
		case isMarker(content, "..."):
			flush()
			start = line + 1
		default:
			if cur == nil {
				start = line
			}
			cur = append(cur, l...)
		}
	}
	flush()
	return docs
}

// isMarker reports whether line is the marker m alone or followed by blanks.
func isMarker(line []byte, m string) bool {
	if !bytes.HasPrefix(line, []byte(m)) {
		return false
	}
	rest := line[len(m):]
	return len(rest) == 0 || rest[0] == ' ' || rest[0] == '\t'
}

// blank reports whether a chunk holds only blank lines, comments and
// directives (%YAML, %TAG).
func blank(chunk []byte) bool {
	for len(chunk) > 0 {
		var l []byte
		if i := bytes.IndexByte(chunk, '\n'); i >= 0 {
			l, chunk = chunk[:i], chunk[i+1:]
		} else {
			l, chunk = chunk, nil
		}
		l = bytes.TrimSpace(l)
		if len(l) == 0 || l[0] == '#' || l[0] == '%' {
			continue
		}
		return false
	}
	return true
}
