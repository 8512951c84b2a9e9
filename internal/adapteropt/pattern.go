package adapteropt

import "sync/atomic"

// Pattern returns the route pattern of a request with method matched by a
// router's template path ("/users/:id"), in http.ServeMux's form: "GET
// /users/:id". The gin and echo adapters set it as Request.Pattern, so
// that a route key tells the methods of one route apart, as ServeMux's
// patterns do; an empty path (no route matched) gives "".
//
// The patterns of up to patternSlots method and route pairs are kept, so
// that the usual request allocates nothing here; a pair whose slot is
// taken is built anew each time, as without the table. Safe for
// concurrent use.
func Pattern(method, path string) string {
	if path == "" {
		return ""
	}
	slot := &patterns[patternHash(method, path)%patternSlots]
	e := slot.Load()
	if e != nil && e.method() == method && e.path() == path {
		return e.pattern
	}
	p := method + " " + path
	if e == nil {
		slot.CompareAndSwap(nil, &patternEntry{pattern: p, methodLen: len(method)})
	}
	return p
}

// patternSlots is the size of Pattern's table (8 KiB of pointers). A slot
// is filled once and never replaced, so neither a collision nor a client's
// invented methods can make a request cost more than building its pattern.
const patternSlots = 1024

var patterns [patternSlots]atomic.Pointer[patternEntry]

// patternEntry is one kept pattern; method and path are slices of it.
type patternEntry struct {
	pattern   string
	methodLen int
}

func (e *patternEntry) method() string { return e.pattern[:e.methodLen] }
func (e *patternEntry) path() string   { return e.pattern[e.methodLen+1:] }

// patternHash is FNV-1a of method, a space and path.
func patternHash(method, path string) uint32 {
	h := uint32(2166136261)
	for i := 0; i < len(method); i++ {
		h = (h ^ uint32(method[i])) * 16777619
	}
	h = (h ^ ' ') * 16777619
	for i := 0; i < len(path); i++ {
		h = (h ^ uint32(path[i])) * 16777619
	}
	return h
}
