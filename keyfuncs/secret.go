package keyfuncs

import "fmt"

// minDistinctBytes is the fewest distinct byte values a secret may hold: a
// random 32-byte secret has about 30, its hex text about 14.
const minDistinctBytes = 8

// secretFault says why JWT refuses the HMAC secret s for an algorithm
// whose hash size is minLen bytes, or returns "".
func secretFault(s []byte, minLen int) string {
	if len(s) < minLen {
		return fmt.Sprintf("%d bytes, want at least %d (the hash size)", len(s), minLen)
	}
	if why := lowEntropy(s); why != "" {
		return why + "; generate it with crypto/rand"
	}
	return ""
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
