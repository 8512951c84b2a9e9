package keyfuncs

import (
	"bytes"
	"fmt"
	"maps"
	"math"
	"strings"
	"sync/atomic"
)

// minDistinctBytes is the fewest distinct byte values a secret may hold: a
// random 32-byte secret has about 30, its hex text about 14.
const minDistinctBytes = 8

// secretFault says why JWT refuses the HMAC secret s for an algorithm
// whose hash size is minLen bytes, or returns "".
func secretFault(s []byte, minLen int) string {
	if len(s) < minLen {
		return fmt.Sprintf("%d bytes, want at least %d (the hash size)", len(s), minLen)
	}
	return secretQuality(s)
}

// secretQuality says why s, long enough, is guessable, or returns "".
func secretQuality(s []byte) string {
	if why := lowEntropy(s); why != "" {
		return why + "; generate it with crypto/rand"
	}
	if bits := guessBits(s); bits < minGuessBits {
		return fmt.Sprintf("about 2^%d guesses find it, want 2^%d: it reads as common words, runs, repeats or few "+
			"characters (a sample or a placeholder?); generate it with crypto/rand", int(bits), minGuessBits)
	}
	return ""
}

// maxVerdicts bounds a verdictCache.
const maxVerdicts = 256

// A verdictCache remembers secretQuality's verdicts on the secrets a
// KeyLookup function returns, which are few and the same token after
// token: the guessing estimate costs about 30 µs for a 64-byte secret. It
// holds at most maxVerdicts secrets; past that, verdicts are computed each
// time. Reads take no lock.
type verdictCache struct {
	m atomic.Pointer[map[string]string]
}

// fault is secretFault, with the verdict on s's quality cached.
func (c *verdictCache) fault(s []byte, minLen int) string {
	if len(s) < minLen {
		return secretFault(s, minLen)
	}
	old := c.m.Load()
	var known map[string]string
	if old != nil {
		known = *old
	}
	if why, ok := known[string(s)]; ok {
		return why
	}
	why := secretQuality(s)
	if len(known) < maxVerdicts {
		m := make(map[string]string, len(known)+1)
		maps.Copy(m, known)
		m[string(s)] = why
		c.m.CompareAndSwap(old, &m) // a lost race only costs a recomputation
	}
	return why
}

// lowEntropy says why s is visibly guessable, or returns "". It looks for
// few distinct bytes, one dominant byte, a repeated pattern and an evenly
// spaced run; a random secret, or its hex or base64 text, shows none.
func lowEntropy(s []byte) string {
	var count, steps [256]int
	distinct, top, topStep := 0, 0, 0
	for i, c := range s {
		if count[c] == 0 {
			distinct++
		}
		count[c]++
		top = max(top, count[c])
		if i > 0 {
			d := c - s[i-1]
			steps[d]++
			topStep = max(topStep, steps[d])
		}
	}
	switch {
	case distinct < minDistinctBytes:
		return fmt.Sprintf("only %d distinct byte values (want at least %d)", distinct, minDistinctBytes)
	case 2*top > len(s):
		return fmt.Sprintf("one byte value makes up %d of its %d bytes", top, len(s))
	case 2*topStep > len(s)-1:
		return "mostly a run of evenly spaced bytes (like \"abcdef\")"
	}
	if p := period(s); 2*p <= len(s) {
		return fmt.Sprintf("it repeats a %d-byte pattern", p)
	}
	return ""
}

// period returns the smallest p > 0 with s[i] == s[i-p] for every i ≥ p
// (len(s) when there is none shorter), from the KMP failure function.
func period(s []byte) int {
	if len(s) == 0 {
		return 0
	}
	var buf [128]int
	fail := buf[:0]
	if len(s) > len(buf) {
		fail = make([]int, 0, len(s))
	}
	fail = append(fail, 0)
	k := 0
	for i := 1; i < len(s); i++ {
		for k > 0 && s[i] != s[k] {
			k = fail[k-1]
		}
		if s[i] == s[k] {
			k++
		}
		fail = append(fail, k)
	}
	return len(s) - k
}

// minGuessBits is the least guessBits a secret must reach. A random secret
// of 32 bytes, or the hex or base64 text of 16 or more random bytes,
// scores well above it (hex of 16 bytes about 150); secrets people write
// by hand score well below (jwt.io's sample, padded to 32 bytes, about 50).
const minGuessBits = 100

// maxGuessScan bounds the bytes guessBits reads: its repeat search is
// quadratic, and 1 KiB is far longer than any secret needs.
const maxGuessScan = 1024

// commonWords are words that secrets written by hand are made of: the
// vocabulary of secrets and keys, of placeholders and samples ("change
// me", "your 256-bit secret", "correct horse battery staple"), and the
// short words that join them. Lower case; guessBits also reads them in
// upper case and with common digit-for-letter substitutions.
var commonWords = strings.Fields(`
	secret secrets password passwd pass pwd passphrase key keys token tokens jwt jws hmac hs256 hs384 hs512 sha256
	sign signing signature auth authentication api app application private public access refresh session cookie
	salt hash crypto encryption encrypt decrypt cipher
	change changeme changeit replace replaceme todo fixme tbd example sample test testing tests demo dummy default
	placeholder temp temporary your my our here this that these is are be a an the it in on at for of to from and or
	not no do dont use only never must should please put insert set value string text random long very super strong
	secure insecure unsafe safe real fake new old dev development local localhost prod production staging stage env
	config configuration server service backend frontend admin administrator root user users guest master main
	qwerty asdf letmein welcome hello world foo bar baz abc xyz bit bits byte bytes 128 256 384 512
	correct horse battery staple lorem ipsum dolor spring boot django rails node express laravel next nextauth
	supabase firebase github google company project purpose purposes valid still rotation rotate generate generated
	`)

// wordsByFirst indexes commonWords by their first byte.
var wordsByFirst = func() map[byte][]string {
	m := map[byte][]string{}
	for _, w := range commonWords {
		m[w[0]] = append(m[w[0]], w)
	}
	return m
}()

// guessBits estimates, in bits, how many guesses find s for an attacker
// who knows how people write secrets (in the manner of zxcvbn): the
// cheapest reading of s as parts, each costing
//
//   - a word of commonWords: log2 of their number, +1 bit for upper case,
//     +1 for digit-for-letter substitutions ("s3cr3t");
//   - a run of 3 or more consecutive characters ("12345678", "abcdef",
//     "zyx"): its start, direction and length, about 10 bits;
//   - a repeat of 3 or more bytes seen before: where and how long, about
//     log2 of its offset and length;
//   - a year (1900 to 2099): 8 bits; a separator (" -_.,:;/|+"): 3.3 bits;
//   - any other byte: log2 of the alphabet s draws from (26 lower case,
//     26 upper case, 10 digits, 33 symbols, or 256 for other bytes).
//
// A random secret reads as other bytes, nearly all of it; text built from
// words, runs and repeats reads as a few parts.
func guessBits(s []byte) float64 {
	s = s[:min(len(s), maxGuessScan)]
	n := len(s)
	byteBits := math.Log2(alphabet(s))
	wordBits := math.Log2(float64(len(commonWords)))
	sepBits := math.Log2(float64(len(separators)))
	lowered := make([]byte, n) // ASCII letters in lower case
	folded := make([]byte, n)  // lowered, digits and symbols read as letters
	for i, c := range s {
		if c >= 'A' && c <= 'Z' {
			c += 'a' - 'A'
		}
		lowered[i], folded[i] = c, unleet(c)
	}
	longest := longestRepeats(s)

	cost := make([]float64, n+1) // cost[i]: the cheapest reading of s[:i]
	for i := 1; i <= n; i++ {
		cost[i] = math.Inf(1)
	}
	relax := func(from, to int, bits float64) {
		if c := cost[from] + bits; c < cost[to] {
			cost[to] = c
		}
	}
	for i := 0; i < n; i++ {
		relax(i, i+1, byteBits)
		if bytes.IndexByte([]byte(separators), s[i]) >= 0 {
			relax(i, i+1, sepBits)
		}
		for _, w := range wordsByFirst[folded[i]] {
			end := i + len(w)
			if end > n || string(folded[i:end]) != w && string(lowered[i:end]) != w {
				continue
			}
			bits := wordBits
			if !bytes.Equal(s[i:end], lowered[i:end]) {
				bits++ // upper case
			}
			if string(lowered[i:end]) != w {
				bits++ // substitutions
			}
			relax(i, end, bits)
		}
		if lowered[i] != folded[i] { // a digit word ("256") under its letter reading
			for _, w := range wordsByFirst[lowered[i]] {
				if end := i + len(w); end <= n && string(lowered[i:end]) == w {
					relax(i, end, wordBits)
				}
			}
		}
		for end := i + 3; end <= n && isRun(s[i:end]); end++ {
			relax(i, end, math.Log2(95*2*float64(end-i)))
		}
		for l := 3; l <= longest[i]; l++ {
			relax(i, i+l, math.Log2(float64(i)*float64(l)))
		}
		if i+4 <= n && isYear(s[i:i+4]) {
			relax(i, i+4, 8)
		}
	}
	return cost[n]
}

// separators are the bytes people join words with.
const separators = " -_.,:;/|+"

// alphabet returns the number of byte values s appears to be drawn from.
func alphabet(s []byte) float64 {
	var lowerCase, upperCase, digit, symbol bool
	for _, c := range s {
		switch {
		case c >= 'a' && c <= 'z':
			lowerCase = true
		case c >= 'A' && c <= 'Z':
			upperCase = true
		case c >= '0' && c <= '9':
			digit = true
		case c >= 0x20 && c < 0x7f:
			symbol = true
		default:
			return 256
		}
	}
	n := 0
	for _, class := range []struct {
		in   bool
		size int
	}{{lowerCase, 26}, {upperCase, 26}, {digit, 10}, {symbol, 33}} {
		if class.in {
			n += class.size
		}
	}
	return float64(n)
}

// longestRepeats returns, for each offset i of s, the length of the
// longest prefix of s[i:] that also starts at an earlier offset.
func longestRepeats(s []byte) []int {
	n := len(s)
	longest := make([]int, n)
	lcp := make([]int, n+1) // lcp[j]: common prefix of s[k:] and s[j:], for the k at hand
	for k := n - 1; k >= 0; k-- {
		for j := k + 1; j < n; j++ { // lcp[j+1] still holds the value for k+1
			if s[k] == s[j] {
				lcp[j] = lcp[j+1] + 1
			} else {
				lcp[j] = 0
			}
			longest[j] = max(longest[j], lcp[j])
		}
	}
	return longest
}

// isRun reports whether s steps by +1 or by -1 throughout, within digits or
// within letters.
func isRun(s []byte) bool {
	step := int(s[1]) - int(s[0])
	if step != 1 && step != -1 {
		return false
	}
	for i := 1; i < len(s); i++ {
		if int(s[i])-int(s[i-1]) != step || class(s[i]) != class(s[0]) || class(s[i]) == 0 {
			return false
		}
	}
	return true
}

// class is 1 for digits, 2 for letters (either case), 0 otherwise.
func class(c byte) int {
	switch {
	case c >= '0' && c <= '9':
		return 1
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		return 2
	}
	return 0
}

// isYear reports whether the 4 bytes of s are a year from 1900 to 2099.
func isYear(s []byte) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return s[0] == '1' && s[1] == '9' || s[0] == '2' && s[1] == '0'
}

// unleet reads a digit or symbol people put for a letter as that letter.
func unleet(c byte) byte {
	switch c {
	case '0':
		return 'o'
	case '1', '!':
		return 'i'
	case '3':
		return 'e'
	case '4', '@':
		return 'a'
	case '5', '$':
		return 's'
	case '7':
		return 't'
	}
	return c
}
