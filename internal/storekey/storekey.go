// Package storekey is the form of the keys a core.Limiter passes to its
// store, written once: core builds them, and the memory store reads back
// which Limiter a key belongs to, so that it can give each Limiter its
// share of its capacity (memorystore.WithMaxKeys).
//
// A Limiter named name charges a request with key k under
// Prefix(name) + k, that is len(name) ":" name ":" k, and a request
// without a key under KeylessPrefix(name) + ..., len(name) ":" name "!"
// .... The length in decimal makes the prefix injective: no key of one
// Limiter is a key of another, whatever either's name and client keys.
package storekey

import "strconv"

// MaxName is the longest name Name reads back: core.New refuses longer
// ones (its names are 1 to 128 printable ASCII characters).
const MaxName = 128

// Prefix returns the prefix of the store keys of the requests a Limiter
// named name charges by their key.
func Prefix(name string) string {
	return strconv.Itoa(len(name)) + ":" + name + ":"
}

// KeylessPrefix returns the prefix of the store keys of the requests
// without a key that a Limiter named name charges (by their address):
// Prefix(name) but for its last byte, which no key of any Limiter has
// there.
func KeylessPrefix(name string) string {
	return strconv.Itoa(len(name)) + ":" + name + "!"
}

// Name returns the name of the Limiter whose prefix (Prefix or
// KeylessPrefix) starts key, and that prefix's length; ok is false for a
// key that no Limiter builds (a store used directly), or one whose name is
// longer than MaxName. It reads at most the first MaxName + 5 bytes of key
// and allocates nothing.
func Name(key string) (name string, prefixLen int, ok bool) {
	n, i := 0, 0
	for ; i < len(key) && i < 3; i++ {
		c := key[i]
		if c < '0' || c > '9' {
			break
		}
		if i == 0 && c == '0' {
			return "", 0, false // no leading zero: one spelling per length
		}
		n = 10*n + int(c-'0')
	}
	if i == 0 || n > MaxName || i+1+n >= len(key) || key[i] != ':' {
		return "", 0, false
	}
	end := i + 1 + n
	if c := key[end]; c != ':' && c != '!' {
		return "", 0, false
	}
	return key[i+1 : end], end + 1, true
}
