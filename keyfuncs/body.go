package keyfuncs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/sluicehq/sluice/core"
)

// maxBodyRead is how much of a body BodyField reads: a login form or its
// JSON is far smaller.
const maxBodyRead = 64 << 10

// BodyField returns a KeyFunc that keys requests by the field name of
// their body, a form (application/x-www-form-urlencoded) or a JSON object
// (application/json or any +json type), by the request's Content-Type: to
// limit logins by the submitted username, say, with one limit whatever the
// client's address. It fails for an empty name or invalid options
// (WithMaxLength bounds the key as for Header, 512 bytes by default).
//
// It reads at most 64 KiB of the body and puts back what it read, so the
// handler reads the whole body as sent (r.Body is replaced; closing it
// closes the original). A form field is matched exactly, as
// Request.PostFormValue does (the URL's query is not read); a JSON field
// at the top level of the object, its name matched without regard to case
// as encoding/json matches struct fields, so that a client cannot send
// "USERNAME" past the key to a handler that decodes "username". A string
// is the key as is, a leading "#" doubled; a number is "#" and its JSON
// text, as JWT keys claims.
//
// Errors: a body of another type (or none), a field absent, empty or JSON
// null wrap core.ErrNoKey; a body over 64 KiB, a field given twice (for
// JSON, in any case), malformed JSON or form encoding, a value that is not
// a string or number, not valid UTF-8 or longer than the maximum are other
// errors. Either way the Limiter's key-error rule applies. The returned
// KeyFunc is safe for concurrent use.
func BodyField(name string, opts ...HeaderOption) (core.KeyFunc, error) {
	cfg := headerConfig{maxLength: defaultHeaderMaxLength}
	for _, opt := range opts {
		if opt != nil {
			opt.apply(&cfg)
		}
	}
	switch {
	case name == "" || len(name) > 256 || !utf8.ValidString(name):
		return nil, fmt.Errorf("keyfuncs: body field name %q: want 1 to 256 bytes of UTF-8", name)
	case cfg.maxLength <= 0:
		return nil, fmt.Errorf("keyfuncs: body field max length %d, want > 0", cfg.maxLength)
	}
	maxLength := cfg.maxLength
	return func(r *http.Request) (string, error) {
		if r == nil {
			return "", errNilRequest
		}
		isJSON, ok := bodyKind(r.Header.Get("Content-Type"))
		if !ok || r.Body == nil || r.Body == http.NoBody {
			return "", fmt.Errorf("keyfuncs: no form or JSON body to read %q from: %w", name, core.ErrNoKey)
		}
		body, err := readBack(r)
		if err != nil {
			return "", err
		}
		var key string
		if isJSON {
			key, err = jsonField(body, name)
		} else {
			key, err = formField(body, name)
		}
		switch {
		case err != nil:
			return "", err
		case len(key) > maxLength:
			return "", fmt.Errorf("keyfuncs: body field %q: value of %d bytes exceeds the maximum of %d", name, len(key), maxLength)
		case !utf8.ValidString(key):
			return "", fmt.Errorf("keyfuncs: body field %q: value is not valid UTF-8", name)
		}
		return key, nil
	}, nil
}

// bodyKind tells a JSON body from a form by the Content-Type; ok is false
// for any other.
func bodyKind(contentType string) (isJSON, ok bool) {
	mt, _, err := mime.ParseMediaType(contentType)
	switch {
	case err != nil:
		return false, false
	case mt == "application/x-www-form-urlencoded":
		return false, true
	case mt == "application/json" || strings.HasPrefix(mt, "application/") && strings.HasSuffix(mt, "+json"):
		return true, true
	}
	return false, false
}

// readBack reads up to maxBodyRead bytes of r's body and puts them back
// in front of the rest. A body longer than that is an error.
func readBack(r *http.Request) ([]byte, error) {
	orig := r.Body
	body, err := io.ReadAll(io.LimitReader(orig, maxBodyRead+1))
	r.Body = readCloser{Reader: io.MultiReader(bytes.NewReader(body), orig), Closer: orig}
	switch {
	case err != nil:
		return nil, fmt.Errorf("keyfuncs: reading the body: %w", err)
	case len(body) > maxBodyRead:
		return nil, fmt.Errorf("keyfuncs: body over %d bytes: not read for a key", maxBodyRead)
	}
	return body, nil
}

type readCloser struct {
	io.Reader
	io.Closer
}

func formField(body []byte, name string) (string, error) {
	values, err := url.ParseQuery(string(body))
	if err != nil {
		return "", fmt.Errorf("keyfuncs: form body: %w", err)
	}
	switch v := values[name]; {
	case len(v) == 0 || len(v) == 1 && v[0] == "":
		return "", fmt.Errorf("keyfuncs: no form field %q: %w", name, core.ErrNoKey)
	case len(v) > 1:
		return "", fmt.Errorf("keyfuncs: form field %q given %d times, want once", name, len(v))
	default:
		return v[0], nil
	}
}

var errJSONBody = errors.New("keyfuncs: JSON body: want an object")

// jsonField returns the key of the top-level member of the JSON object
// body named name, in any case.
func jsonField(body []byte, name string) (string, error) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", errJSONBody
	}
	var found json.RawMessage
	seen := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", fmt.Errorf("keyfuncs: JSON body: %w", err)
		}
		k, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return "", fmt.Errorf("keyfuncs: JSON body: %w", err)
		}
		if !strings.EqualFold(k, name) {
			continue
		}
		if seen {
			return "", fmt.Errorf("keyfuncs: JSON field %q given twice (names match in any case)", name)
		}
		found, seen = v, true
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return "", fmt.Errorf("keyfuncs: JSON body: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return "", fmt.Errorf("keyfuncs: JSON body: data after the object")
	}
	if !seen || string(found) == "null" {
		return "", fmt.Errorf("keyfuncs: no JSON field %q: %w", name, core.ErrNoKey)
	}
	if !utf8.Valid(found) { // encoding/json would make it U+FFFD: not one key per value
		return "", fmt.Errorf("keyfuncs: JSON field %q: value is not valid UTF-8", name)
	}
	var v any
	d := json.NewDecoder(bytes.NewReader(found))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return "", fmt.Errorf("keyfuncs: JSON field %q: %w", name, err)
	}
	switch v := v.(type) {
	case string:
		if v == "" {
			return "", fmt.Errorf("keyfuncs: JSON field %q is empty: %w", name, core.ErrNoKey)
		}
		if v[0] == numberMark {
			return string(numberMark) + v, nil
		}
		return v, nil
	case json.Number:
		return string(numberMark) + v.String(), nil
	default:
		return "", fmt.Errorf("keyfuncs: JSON field %q is a %s, want a string or a number", name, jsonKind(v))
	}
}
