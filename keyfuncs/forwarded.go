package keyfuncs

import (
	"errors"
	"fmt"
	"strings"
)

// errNilRequest is returned by every KeyFunc of this package for a nil request.
var errNilRequest = errors.New("keyfuncs: nil request")

// forwardedElement is one element of an RFC 7239 Forwarded header: the part
// one proxy added. Only its for= parameter matters here.
type forwardedElement struct {
	forValue string // unquoted value of for=
	hasFor   bool
	empty    bool // an empty list element (RFC 9110 §5.6.1), or a blank line
}

// Registered parameters (RFC 7239 §5), whose repetition within one element
// lastForwarded refuses.
var forwardedParams = [...]string{"for", "by", "host", "proto"}

// lastForwarded parses the last list element of one Forwarded header line
// (RFC 7239 §4), reading from the right, and returns it with the text left
// of its separating comma:
//
//	Forwarded         = 1#forwarded-element
//	forwarded-element = [ forwarded-pair ] *( ";" [ forwarded-pair ] )
//	forwarded-pair    = token "=" value
//	value             = token / quoted-string
//
// ok is false when line holds nothing. An empty element (",," or a blank
// line) comes back as one with empty set. Whitespace is accepted around ","
// and ";". A registered parameter repeated within the element, a missing
// "=", an unterminated quoted string (or one whose closing quote is
// escaped) or any stray character is an error.
//
// Reading from the right, the elements a trusted proxy appended are split
// exactly as it wrote them, whatever the client wrote before: a
// well-formed element ends at its own comma, and a client's open quote or
// stray bytes further left are never read. The work is proportional to
// the elements read, never to the rest of the line; nothing is allocated
// unless a quoted for= value holds an escape.
func lastForwarded(line string) (e forwardedElement, rest string, ok bool, err error) {
	i := skipOWSLeft(line, len(line))
	switch {
	case i == 0:
		return forwardedElement{empty: true}, "", line != "", nil
	case line[i-1] == ',':
		return forwardedElement{empty: true}, line[:i-1], true, nil
	}
	var seen [len(forwardedParams)]bool
	needSep := false // a pair was read: a separator or the start must come next
	for {
		i = skipOWSLeft(line, i)
		switch {
		case i == 0:
			return e, "", true, nil
		case line[i-1] == ',':
			return e, line[:i-1], true, nil
		case line[i-1] == ';':
			i, needSep = i-1, false
			continue
		case needSep:
			return e, "", true, fmt.Errorf("unexpected %q at offset %d", line[i-1], i-1)
		}
		name, value, start, err := lastPair(line, i)
		if err != nil {
			return e, "", true, err
		}
		for p, known := range forwardedParams {
			if strings.EqualFold(name, known) {
				if seen[p] {
					return e, "", true, fmt.Errorf("parameter %s repeated in one element", quoteShort(known))
				}
				seen[p] = true
			}
		}
		if strings.EqualFold(name, "for") {
			e.forValue, e.hasFor = value, true
		}
		i, needSep = start, true
	}
}

// lastPair parses the forwarded-pair ending at line[end-1], reading from the
// right: its name, its value unquoted, and the offset where it starts.
func lastPair(line string, end int) (name, value string, start int, err error) {
	i := end
	if line[i-1] == '"' {
		if i, err = openingQuote(line, i-1); err != nil {
			return "", "", 0, err
		}
		var next int
		if value, next, err = readQuoted(line, i); err != nil || next != end {
			return "", "", 0, fmt.Errorf("malformed quoted string at offset %d", i)
		}
	} else {
		for i > 0 && isTchar(line[i-1]) {
			i--
		}
		if i == end {
			return "", "", 0, fmt.Errorf("unexpected %q at offset %d", line[end-1], end-1)
		}
		value = line[i:end]
	}
	if i == 0 || line[i-1] != '=' {
		return "", "", 0, fmt.Errorf("value without a parameter name at offset %d", i)
	}
	j := i - 1
	for j > 0 && isTchar(line[j-1]) {
		j--
	}
	if j == i-1 {
		return "", "", 0, fmt.Errorf("parameter without a name at offset %d", i-1)
	}
	return line[j : i-1], value, j, nil
}

// openingQuote returns the offset of the quote opening the quoted-string
// whose closing quote is line[close]. Inside a quoted-string every quote
// but the last is escaped, that is preceded by an odd run of backslashes;
// the opening one by an even run (none, after "=").
func openingQuote(line string, close int) (int, error) {
	if backslashesBefore(line, close)%2 == 1 {
		return 0, fmt.Errorf("escaped quote at offset %d outside a quoted string", close)
	}
	for j := close - 1; j >= 0; j-- {
		if line[j] == '"' && backslashesBefore(line, j)%2 == 0 {
			return j, nil
		}
	}
	return 0, fmt.Errorf("unterminated quoted string ending at offset %d", close)
}

// backslashesBefore counts the backslashes immediately before line[i].
func backslashesBefore(line string, i int) int {
	n := 0
	for i-n > 0 && line[i-n-1] == '\\' {
		n++
	}
	return n
}

// skipOWSLeft returns i moved left over optional whitespace.
func skipOWSLeft(s string, i int) int {
	for i > 0 && (s[i-1] == ' ' || s[i-1] == '\t') {
		i--
	}
	return i
}

// readQuoted reads the quoted-string starting at line[i] == '"' and returns
// its unescaped content and the offset after the closing quote. It
// allocates only for content holding an escape.
func readQuoted(line string, i int) (string, int, error) {
	start := i
	i++ // opening quote
	if end := strings.IndexAny(line[i:], "\"\\"); end >= 0 && line[i+end] == '"' && plainQdtext(line[i:i+end]) {
		return line[i : i+end], i + end + 1, nil
	}
	var b strings.Builder
	for i < len(line) {
		c := line[i]
		switch {
		case c == '"':
			return b.String(), i + 1, nil
		case c == '\\':
			if i+1 == len(line) {
				return "", 0, fmt.Errorf("unterminated quoted string at offset %d", start)
			}
			next := line[i+1]
			if next != '\t' && (next < 0x20 || next == 0x7f) {
				return "", 0, fmt.Errorf("invalid escaped byte %#x at offset %d", next, i+1)
			}
			b.WriteByte(next)
			i += 2
		case c == '\t' || c >= 0x20 && c != 0x7f:
			b.WriteByte(c)
			i++
		default:
			return "", 0, fmt.Errorf("invalid byte %#x in quoted string at offset %d", c, i)
		}
	}
	return "", 0, fmt.Errorf("unterminated quoted string at offset %d", start)
}

// plainQdtext reports whether every byte of s may stand unescaped in a
// quoted-string.
func plainQdtext(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '\t' && (c < 0x20 || c == 0x7f) {
			return false
		}
	}
	return true
}

// isTchar reports whether c may appear in an RFC 9110 token.
func isTchar(c byte) bool {
	if isAlnum(c) {
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// validHeaderName reports whether name is a non-empty token.
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		if !isTchar(name[i]) {
			return false
		}
	}
	return true
}
