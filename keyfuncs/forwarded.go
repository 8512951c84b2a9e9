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
}

// parseForwarded parses one Forwarded header line (RFC 7239 §4):
//
//	Forwarded         = 1#forwarded-element
//	forwarded-element = [ forwarded-pair ] *( ";" [ forwarded-pair ] )
//	forwarded-pair    = token "=" value
//	value             = token / quoted-string
//
// Empty list elements are skipped; whitespace is accepted around "," and
// ";". A parameter repeated within one element, a missing "=", an
// unterminated quoted string or any stray character is an error: a
// malformed line cannot be split into elements reliably (a client's open
// quote could swallow a proxy's comma), so none of it is trusted.
func parseForwarded(line string) ([]forwardedElement, error) {
	var elems []forwardedElement
	i := 0
	for {
		i = skipOWS(line, i)
		if i == len(line) {
			return elems, nil
		}
		if line[i] == ',' { // empty element
			i++
			continue
		}
		e, next, err := parseElement(line, i)
		if err != nil {
			return nil, err
		}
		elems = append(elems, e)
		i = next
	}
}

// parseElement parses the forwarded-element starting at line[i] and
// returns it with the offset of the "," or end of line after it.
func parseElement(line string, i int) (forwardedElement, int, error) {
	var e forwardedElement
	seen := map[string]bool{}
	for {
		i = skipOWS(line, i)
		if i == len(line) || line[i] == ',' {
			return e, i, nil
		}
		if line[i] == ';' { // empty pair
			i++
			continue
		}
		name, value, next, err := parsePair(line, i)
		if err != nil {
			return e, 0, err
		}
		if seen[name] {
			return e, 0, fmt.Errorf("parameter %s repeated in one element", quoteShort(name))
		}
		seen[name] = true
		if name == "for" {
			e.forValue, e.hasFor = value, true
		}
		i = skipOWS(line, next)
		if i == len(line) || line[i] == ',' {
			return e, i, nil
		}
		if line[i] != ';' {
			return e, 0, fmt.Errorf("unexpected %q at offset %d", line[i], i)
		}
		i++
	}
}

// parsePair parses the forwarded-pair starting at line[i]: its name in
// lower case, its value unquoted, and the offset after it.
func parsePair(line string, i int) (name, value string, next int, err error) {
	start := i
	for i < len(line) && isTchar(line[i]) {
		i++
	}
	name = strings.ToLower(line[start:i])
	if name == "" {
		return "", "", 0, fmt.Errorf("unexpected %q at offset %d", line[i], i)
	}
	if i == len(line) || line[i] != '=' {
		return "", "", 0, fmt.Errorf("parameter %s without '=' at offset %d", quoteShort(name), i)
	}
	i++
	if i < len(line) && line[i] == '"' {
		value, i, err = readQuoted(line, i)
		return name, value, i, err
	}
	start = i
	for i < len(line) && isTchar(line[i]) {
		i++
	}
	if start == i {
		return "", "", 0, fmt.Errorf("parameter %s without a value at offset %d", quoteShort(name), i)
	}
	return name, line[start:i], i, nil
}

// readQuoted reads the quoted-string starting at line[i] == '"' and returns
// its unescaped content and the offset after the closing quote.
func readQuoted(line string, i int) (string, int, error) {
	start := i
	i++ // opening quote
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

func skipOWS(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
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
