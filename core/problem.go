package core

import (
	"encoding/json"
	"net/http"
)

// The problem types of draft-ietf-httpapi-ratelimit-headers-11.
const (
	problemQuotaExceeded   = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	problemReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// problem is an RFC 9457 problem details object with the draft's
// "violated-policies" member.
type problem struct {
	Type     string   `json:"type"`
	Title    string   `json:"title"`
	Status   int      `json:"status"`
	Violated []string `json:"violated-policies"`
}

var forbiddenProblem = Response{
	Status:      http.StatusForbidden,
	ContentType: "application/problem+json",
	Body:        []byte(`{"type":"about:blank","title":"Forbidden","status":403}` + "\n"),
}

// ProblemJSON answers refusals with the problem details (RFC 9457,
// application/problem+json) of draft-ietf-httpapi-ratelimit-headers-11;
// pass it to WithRefusal. A request over a limit gets 429 with the draft's
// quota-exceeded type, whose "violated-policies" names the IETF policies
// (see HeadersIETF) of the limits that refused it:
//
//	{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",
//	 "title":"Quota exceeded","status":429,"violated-policies":["api"]}
//
// A 503 (FailClosed, a Hold cut short) gets the temporary-reduced-capacity
// type, naming the policy that held the request (none when no store
// decided); a 403 (KeyErrorDeny) gets "about:blank". The headers,
// Retry-After included, are the same as without it. Any other Response of
// d is returned as it is.
func ProblemJSON(r *http.Request, d Decision) Response {
	resp := d.Response()
	var p problem
	switch resp.Status {
	case http.StatusTooManyRequests:
		p = problem{Type: problemQuotaExceeded, Title: "Quota exceeded", Status: resp.Status}
	case http.StatusServiceUnavailable:
		p = problem{Type: problemReducedCapacity, Title: "Temporarily reduced capacity", Status: resp.Status}
	case http.StatusForbidden:
		return forbiddenProblem
	default:
		return resp
	}
	p.Violated = d.violatedPolicies()
	body, _ := json.Marshal(p) // strings and an int: it cannot fail
	return Response{Status: resp.Status, ContentType: "application/problem+json", Body: append(body, '\n')}
}

// violatedPolicies returns the IETF policy names of the limits that
// refused d (or held it, for a Hold), never nil.
func (d Decision) violatedPolicies() []string {
	names := []string{}
	if !d.hasFigures() {
		return names
	}
	public := d.l.headers.public
	res := &d.Result
	if len(res.PerLimit) == len(public) && !res.Allowed {
		for i := range res.PerLimit {
			if !res.PerLimit[i].Allowed {
				names = append(names, public[i])
			}
		}
		return names
	}
	if b := res.Binding; b >= 0 && b < len(public) {
		names = append(names, public[b])
	}
	return names
}
