package model

// jscan reads JSON for the fast decoders (fastdecode.go). Every method
// returns false on anything it does not take, valid JSON or not; the
// caller then leaves the whole object to encoding/json.
type jscan struct {
	b     []byte
	i     int
	depth int // of the values being skipped
}

// maxSkipDepth bounds the nesting of skipped values (encoding/json's own
// bound is 10000; deeper input goes to encoding/json, which refuses it).
const maxSkipDepth = 1000

func (s *jscan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek returns the next byte after white space, 0 at the end.
func (s *jscan) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// eat consumes c, after white space, if it comes next.
func (s *jscan) eat(c byte) bool {
	if s.peek() == c {
		s.i++
		return true
	}
	return false
}

// end reports whether only white space is left.
func (s *jscan) end() bool {
	s.ws()
	return s.i == len(s.b)
}

// plain reads a string of printable ASCII without escapes and returns its
// bytes, which alias the input.
func (s *jscan) plain() ([]byte, bool) {
	if !s.eat('"') {
		return nil, false
	}
	start := s.i
	for s.i < len(s.b) {
		c := s.b[s.i]
		if c == '"' {
			s.i++
			return s.b[start : s.i-1], true
		}
		if c < 0x20 || c == '\\' || c >= 0x80 {
			return nil, false
		}
		s.i++
	}
	return nil, false
}

// str reads a plain string (see plain).
func (s *jscan) str() (string, bool) {
	v, ok := s.plain()
	if !ok {
		return "", false
	}
	return intern(v), true
}

// intern returns v as a string, the common short values without
// allocating.
func intern(v []byte) string {
	if c := constString(v); c != "" {
		return c
	}
	return string(v)
}

// int32 reads an integer (no fraction, no exponent) in int32's range.
func (s *jscan) int32() (int32, bool) {
	s.ws()
	neg := s.i < len(s.b) && s.b[s.i] == '-'
	if neg {
		s.i++
	}
	start := s.i
	var n int64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		if s.i-start >= 10 {
			return 0, false
		}
		n = n*10 + int64(s.b[s.i]-'0')
		s.i++
	}
	switch {
	case s.i == start, s.b[start] == '0' && s.i-start > 1:
		return 0, false // no digits, or a leading zero
	case s.i < len(s.b) && (s.b[s.i] == '.' || s.b[s.i] == 'e' || s.b[s.i] == 'E'):
		return 0, false
	}
	if neg {
		n = -n
	}
	if n < -1<<31 || n > 1<<31-1 {
		return 0, false
	}
	return int32(n), true
}

// bool reads true or false.
func (s *jscan) bool() (bool, bool) {
	switch s.peek() {
	case 't':
		return true, s.literal("true")
	case 'f':
		return false, s.literal("false")
	}
	return false, false
}

func (s *jscan) literal(word string) bool {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return false
	}
	s.i += len(word)
	return true
}

// fields reads an object whose members named in names it hands to read,
// by index, with the scanner at the member's value (read must consume
// it); it skips the other members. It takes no member named twice and
// none whose name matches one of names only without regard to case
// (encoding/json would take it as that field).
func (s *jscan) fields(names []string, read func(i int) bool) bool {
	if !s.eat('{') {
		return false
	}
	if s.eat('}') {
		return true
	}
	var seen uint64
	for {
		k, ok := s.plain()
		if !ok || !s.eat(':') {
			return false
		}
		i := field(k, names)
		switch {
		case i == -2:
			return false
		case i == -1:
			if !s.skip() {
				return false
			}
		case seen&(1<<i) != 0:
			return false
		default:
			seen |= 1 << i
			if s.peek() == 'n' || !read(i) {
				return false // null leaves a field as it was: encoding/json's case
			}
		}
		if s.eat(',') {
			continue
		}
		return s.eat('}')
	}
}

// members reads an object whose keys are plain strings, calling member
// with each key once its colon is read; member must consume the value.
func (s *jscan) members(member func(key []byte) bool) bool {
	if !s.eat('{') {
		return false
	}
	if s.eat('}') {
		return true
	}
	for {
		k, ok := s.plain()
		if !ok || !s.eat(':') || !member(k) {
			return false
		}
		if s.eat(',') {
			continue
		}
		return s.eat('}')
	}
}

// stringMap reads an object of plain keys and string values into a new
// map, as encoding/json fills a map[string]string: a repeated key keeps
// its last value, {} gives an empty map.
func (s *jscan) stringMap() (map[string]string, bool) {
	if s.peek() != '{' {
		return nil, false
	}
	m := map[string]string{}
	ok := s.members(func(k []byte) bool {
		v, ok := s.str()
		m[string(k)] = v
		return ok
	})
	return m, ok
}

// field returns the index of key in names, -1 if it is none of them, and
// -2 if it equals one of them only without regard to ASCII case.
func field(key []byte, names []string) int {
	for i, n := range names {
		if string(key) == n {
			return i
		}
	}
	for _, n := range names {
		if equalFoldASCII(key, n) {
			return -2
		}
	}
	return -1
}

func equalFoldASCII(a []byte, b string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range len(a) {
		x, y := a[i], b[i]
		if x|0x20 != y|0x20 {
			return false
		}
		if x != y && (x|0x20 < 'a' || x|0x20 > 'z') {
			return false
		}
	}
	return true
}

// array reads an array, calling elem at each element (elem must consume
// it).
func (s *jscan) array(elem func() bool) bool {
	if !s.eat('[') {
		return false
	}
	if s.eat(']') {
		return true
	}
	for {
		if s.peek() == 'n' || !elem() {
			return false
		}
		if s.eat(',') {
			continue
		}
		return s.eat(']')
	}
}

// skip consumes any one JSON value, validating it.
func (s *jscan) skip() bool {
	switch s.peek() {
	case '"':
		return s.skipString()
	case '{':
		if s.depth++; s.depth > maxSkipDepth {
			return false
		}
		s.i++
		if !s.eat('}') {
			for {
				if s.peek() != '"' || !s.skipString() || !s.eat(':') || !s.skip() {
					return false
				}
				if s.eat(',') {
					continue
				}
				if !s.eat('}') {
					return false
				}
				break
			}
		}
		s.depth--
		return true
	case '[':
		if s.depth++; s.depth > maxSkipDepth {
			return false
		}
		s.i++
		if !s.eat(']') {
			for {
				if !s.skip() {
					return false
				}
				if s.eat(',') {
					continue
				}
				if !s.eat(']') {
					return false
				}
				break
			}
		}
		s.depth--
		return true
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	default:
		return s.skipNumber()
	}
}

// skipString consumes a string, validating its escapes.
func (s *jscan) skipString() bool {
	if !s.eat('"') {
		return false
	}
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			return true
		case c < 0x20:
			return false
		case c == '\\':
			s.i++
			if s.i >= len(s.b) {
				return false
			}
			switch s.b[s.i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				if len(s.b)-s.i < 5 {
					return false
				}
				for _, h := range s.b[s.i+1 : s.i+5] {
					if !isHex(h) {
						return false
					}
				}
				s.i += 5
			default:
				return false
			}
		default:
			s.i++
		}
	}
	return false
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// skipNumber consumes a number: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *jscan) skipNumber() bool {
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	switch {
	case s.i < len(s.b) && s.b[s.i] == '0':
		s.i++
	case s.digits() == 0:
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if s.digits() == 0 {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if s.digits() == 0 {
			return false
		}
	}
	return true
}

func (s *jscan) digits() int {
	start := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	return s.i - start
}
