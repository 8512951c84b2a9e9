package keyfuncs

import (
	"fmt"
	"strings"
)

// refParseForwarded parses one Forwarded header line (RFC 7239 §4):
//
//	Forwarded         = 1#forwarded-element
//	forwarded-element = [ forwarded-pair ] *( ";" [ forwarded-pair ] )
//	forwarded-pair    = token "=" value
//	value             = token / quoted-string
//
// reading from the left: the parser IP used before lastForwarded, kept as
// the reference lastForwarded is checked against. Empty list elements are
// skipped; whitespace is accepted around "," and ";". A parameter repeated
// within one element, a missing "=", an unterminated quoted string or any
// stray character is an error.
func refParseForwarded(line string) ([]forwardedElement, error) {
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
		e, next, err := refParseElement(line, i)
		if err != nil {
			return nil, err
		}
		elems = append(elems, e)
		i = next
	}
}

// refParseElement parses the forwarded-element starting at line[i] and
// returns it with the offset of the "," or end of line after it.
func refParseElement(line string, i int) (forwardedElement, int, error) {
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
		name, value, next, err := refParsePair(line, i)
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

// refParsePair parses the forwarded-pair starting at line[i]: its name in
// lower case, its value unquoted, and the offset after it.
func refParsePair(line string, i int) (name, value string, next int, err error) {
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

func skipOWS(s string, i int) int {
	for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
		i++
	}
	return i
}
