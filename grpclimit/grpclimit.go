package grpclimit

import (
	"context"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/store"
)

// UnaryServerInterceptor returns an interceptor that limits each unary
// call with l (see the package documentation), for grpc.UnaryInterceptor
// or grpc.ChainUnaryInterceptor. It panics if l is nil.
func UnaryServerInterceptor(l *core.Limiter) grpc.UnaryServerInterceptor {
	if l == nil {
		panic("grpclimit: UnaryServerInterceptor with a nil Limiter")
	}
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		c, err := decide(ctx, l, info.FullMethod)
		if c.trailer != nil {
			defer func() { _ = grpc.SetTrailer(ctx, c.metadata()) }()
		}
		if err != nil {
			return nil, err
		}
		defer c.done(&err)
		return handler(c.ctx, req)
	}
}

// StreamServerInterceptor returns an interceptor that limits each stream
// with l, once when it opens (see the package documentation), for
// grpc.StreamInterceptor or grpc.ChainStreamInterceptor. It panics if l is
// nil.
func StreamServerInterceptor(l *core.Limiter) grpc.StreamServerInterceptor {
	if l == nil {
		panic("grpclimit: StreamServerInterceptor with a nil Limiter")
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		c, err := decide(ss.Context(), l, info.FullMethod)
		if c.trailer != nil {
			defer func() { ss.SetTrailer(c.metadata()) }()
		}
		if err != nil {
			return err
		}
		defer c.done(&err)
		return handler(srv, &stream{ServerStream: ss, ctx: c.ctx})
	}
}

// stream is a ServerStream whose Context carries the binding Decision.
type stream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *stream) Context() context.Context { return s.ctx }

// trailerKey keys, in a call's context, the rate-limit fields the
// interceptors of one call share: the first one (the outermost) sets them
// as trailers once the call ends, the binding Decision's (core.Decision.Stack).
type trailerKey struct{}

// call is one interceptor's decision on a call.
type call struct {
	ctx     context.Context // the handler's: with the binding Decision
	d       core.Decision
	trailer http.Header // set by the outermost interceptor only, else nil
}

// decide asks l about the call of method with ctx and carries the
// decision out: it returns the error to answer a refusal with, after
// holding the call for a LeakyBucket delay.
func decide(ctx context.Context, l *core.Limiter, method string) (call, error) {
	h, inner := ctx.Value(trailerKey{}).(http.Header)
	if !inner {
		h = make(http.Header, 6)
	}
	r := request(ctx, method)
	d := l.Decide(r)
	r = d.Stack(r, h)
	c := call{ctx: r.Context(), d: d}
	if !inner {
		c.trailer = h
		c.ctx = context.WithValue(c.ctx, trailerKey{}, h)
	}
	switch d.Action {
	case core.Hold:
		if err := d.Wait(ctx); err != nil {
			d.Done(http.StatusServiceUnavailable)
			return c, status.FromContextError(err).Err()
		}
	case core.Refuse:
		return c, refusal(ctx, d)
	}
	return c, nil
}

// request is the HTTP request a gRPC call stands for, for the Limiter's
// key, plan, cost and skip functions: method POST, URL path and Pattern
// the full method ("/pkg.Service/Method"), the incoming metadata as
// header fields, the peer's address as RemoteAddr and :authority as Host.
func request(ctx context.Context, method string) *http.Request {
	h := http.Header{}
	var host string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		for k, v := range md {
			if strings.HasPrefix(k, ":") {
				if k == ":authority" && len(v) > 0 {
					host = v[0]
				}
				continue
			}
			h[textproto.CanonicalMIMEHeaderKey(k)] = v
		}
	}
	var addr string
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		addr = p.Addr.String()
	}
	r := &http.Request{
		Method: http.MethodPost, URL: &url.URL{Path: method}, RequestURI: method, Pattern: method,
		Proto: "HTTP/2.0", ProtoMajor: 2, Header: h, Host: host, RemoteAddr: addr,
	}
	return r.WithContext(ctx)
}

// refusal is the status error of a refused call: ResourceExhausted with
// the retry delay (google.rpc.RetryInfo) over a limit, Unavailable when the
// store could not decide (core.FailClosed), PermissionDenied without a key
// under core.KeyErrorDeny, the context's error when the client has gone.
func refusal(ctx context.Context, d core.Decision) error {
	if d.Outcome == core.OutcomeCanceled && ctx.Err() != nil {
		return status.FromContextError(ctx.Err()).Err()
	}
	switch d.Response().Status {
	case http.StatusTooManyRequests:
		st := status.New(codes.ResourceExhausted, "rate limit exceeded")
		if ra := d.Result.RetryAfter; ra > 0 && ra != store.InfDuration {
			if with, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(ra)}); err == nil {
				st = with
			}
		}
		return st.Err()
	case http.StatusForbidden:
		return status.Error(codes.PermissionDenied, "forbidden")
	default:
		return status.Error(codes.Unavailable, "service unavailable")
	}
}

// done calls Decision.Done, when needed, with the HTTP status of the
// call's outcome: *err, or a panic (500, and the panic goes on).
func (c *call) done(err *error) {
	if !c.d.NeedsDone() {
		return
	}
	if p := recover(); p != nil {
		c.d.Done(http.StatusInternalServerError)
		panic(p)
	}
	c.d.Done(httpStatus(status.Code(*err)))
}

// httpStatus maps a gRPC code to the HTTP status google.rpc.Code gives it,
// for the count function of core.WithCountIf.
func httpStatus(code codes.Code) int {
	switch code {
	case codes.OK:
		return http.StatusOK
	case codes.Canceled:
		return 499 // client closed request
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	default: // Unknown, Internal, DataLoss
		return http.StatusInternalServerError
	}
}

// metadata returns the rate-limit fields as trailing metadata, their
// names in lower case ("x-ratelimit-remaining", "ratelimit", ...).
func (c *call) metadata() metadata.MD {
	md := make(metadata.MD, len(c.trailer))
	for k, v := range c.trailer {
		md[strings.ToLower(k)] = v
	}
	return md
}
