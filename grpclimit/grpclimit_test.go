package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/core/memorystore"
	"github.com/sluicehq/sluice/core/redisstore"
	"github.com/sluicehq/sluice/core/store"
	"github.com/sluicehq/sluice/grpclimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfuncs"
)

// serve starts a gRPC server on a loopback port with the interceptors of
// l, the health service and the test service (see echoDesc), and returns
// a client connection to it.
func serve(t *testing.T, l *core.Limiter, echo func(context.Context) error) *grpc.ClientConn {
	t.Helper()
	gs := grpc.NewServer(
		grpc.ChainUnaryInterceptor(grpclimit.UnaryServerInterceptor(l)),
		grpc.ChainStreamInterceptor(grpclimit.StreamServerInterceptor(l)))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	if echo != nil {
		gs.RegisterService(echoDesc(echo), nil)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// echoDesc is a service of two unary methods, /test.Echo/A and
// /test.Echo/B, taking and returning google.protobuf.Empty, whose handler
// returns what f does.
func echoDesc(f func(context.Context) error) *grpc.ServiceDesc {
	method := func(name string) grpc.MethodDesc {
		return grpc.MethodDesc{MethodName: name, Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(emptypb.Empty)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, _ any) (any, error) { return new(emptypb.Empty), f(ctx) }
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/test.Echo/" + name}, h)
		}}
	}
	return &grpc.ServiceDesc{ServiceName: "test.Echo", HandlerType: (*any)(nil), Methods: []grpc.MethodDesc{method("A"), method("B")}}
}

func callEcho(ctx context.Context, conn *grpc.ClientConn, method string, opts ...grpc.CallOption) error {
	return conn.Invoke(ctx, "/test.Echo/"+method, new(emptypb.Empty), new(emptypb.Empty), opts...)
}

func withKey(key string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key)
}

// retryDelay returns the RetryInfo delay of a status error.
func retryDelay(t *testing.T, err error) time.Duration {
	t.Helper()
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	t.Fatalf("%v: no RetryInfo", err)
	return 0
}

// Two instances of a service, each its own Limiter on its own Redis store,
// one Redis: the calls of a client, keyed by its "x-api-key" metadata,
// unary and streams alike, share one allowance across both; another key
// has its own. The refused call gets ResourceExhausted with the delay in a
// RetryInfo, and the rate-limit fields in its trailers.
func TestTwoInstancesOneRedisByMetadata(t *testing.T) {
	srv := redistest.StartServer(t)
	prefix := fmt.Sprintf("grpclimit:%d:", os.Getpid())
	limit := store.Limit{Algorithm: store.GCRA, Rate: 3, Period: time.Hour} // T = 20 min
	instance := func() (healthpb.HealthClient, *grpc.ClientConn) {
		// go-redis cuts a read at the earlier of the context's deadline and
		// ReadTimeout: both are the store's 10 s, for a loaded machine.
		client := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, ContextTimeoutEnabled: true,
			ReadTimeout: 10 * time.Second, WriteTimeout: 10 * time.Second})
		t.Cleanup(func() { _ = client.Close() })
		st, err := redisstore.New(client, redisstore.WithPrefix(prefix), redisstore.WithTimeout(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = st.Close() })
		key, err := keyfuncs.Header("x-api-key")
		if err != nil {
			t.Fatal(err)
		}
		l, err := core.New(st, "rpc", key, []store.Limit{limit}, core.WithHeaders(core.HeadersLegacy|core.HeadersIETF))
		if err != nil {
			t.Fatal(err)
		}
		conn := serve(t, l, nil)
		return healthpb.NewHealthClient(conn), conn
	}
	a, _ := instance()
	b, _ := instance()

	check := func(c healthpb.HealthClient, key string) (metadata.MD, error) {
		var tr metadata.MD
		_, err := c.Check(withKey(key), &healthpb.HealthCheckRequest{}, grpc.Trailer(&tr))
		return tr, err
	}
	watch := func(c healthpb.HealthClient, key string) (metadata.MD, error) {
		ctx, cancel := context.WithCancel(withKey(key))
		defer cancel()
		s, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return nil, err
		}
		if _, err := s.Recv(); err != nil {
			return s.Trailer(), err
		}
		return nil, nil
	}

	// alice: a unary call on a, a stream on b, a unary call on b: 3 of 3.
	tr, err := check(a, "alice")
	if err != nil || tr.Get("x-ratelimit-remaining")[0] != "2" || tr.Get("x-ratelimit-limit")[0] != "3" {
		t.Fatalf("first call: %v, trailers %v", err, tr)
	}
	if _, err := watch(b, "alice"); err != nil {
		t.Fatalf("stream on the other instance: %v", err)
	}
	if tr, err := check(b, "alice"); err != nil || tr.Get("x-ratelimit-remaining")[0] != "0" {
		t.Fatalf("third call: %v, trailers %v", err, tr)
	}

	// The 4th, on either instance, unary or stream, is refused.
	tr, err = check(a, "alice")
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("fourth call: %v, want ResourceExhausted", err)
	}
	if d := retryDelay(t, err); d <= 19*time.Minute || d > 20*time.Minute {
		t.Errorf("retry delay %v, want about 20 min", d)
	}
	ra, _ := strconv.Atoi(tr.Get("retry-after")[0])
	if ra < 19*60 || ra > 20*60 || tr.Get("x-ratelimit-remaining")[0] != "0" ||
		tr.Get("ratelimit-policy")[0] != `"default";q=3;w=3600` || tr.Get("ratelimit")[0] != `"default";r=0;t=`+strconv.Itoa(ra) {
		t.Errorf("trailers of the refusal: %v", tr)
	}
	tr, err = watch(b, "alice")
	if status.Code(err) != codes.ResourceExhausted || len(tr.Get("retry-after")) != 1 {
		t.Errorf("stream after the allowance: %v, trailers %v", err, tr)
	}

	// bob has his own allowance, on both.
	if tr, err := check(b, "bob"); err != nil || tr.Get("x-ratelimit-remaining")[0] != "2" {
		t.Errorf("bob: %v, trailers %v", err, tr)
	}
	if _, err := watch(a, "bob"); err != nil {
		t.Errorf("bob's stream: %v", err)
	}
}

// Keys from the peer's address (keyfuncs.IP) and from the method
// (keyfuncs.Route, joined with the metadata key): the request the
// Limiter sees carries them.
func TestKeysFromPeerAndMethod(t *testing.T) {
	ip, err := keyfuncs.IP()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	record := core.WithObserver(func(ev core.Event) { keys = append(keys, ev.Key) })
	byPeer, err := core.New(memorystore.New(), "peer", ip, []store.Limit{store.PerHour(1)}, record)
	if err != nil {
		t.Fatal(err)
	}
	conn := serve(t, byPeer, func(context.Context) error { return nil })
	if err := callEcho(context.Background(), conn, "A"); err != nil {
		t.Fatal(err)
	}
	// The client's own forwarding header is not trusted.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-for", "203.0.113.9")
	if err := callEcho(ctx, conn, "B"); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("second call from the same peer: %v", err)
	}
	if len(keys) != 2 || keys[0] != "127.0.0.1" || keys[1] != "127.0.0.1" {
		t.Errorf("keys %q", keys)
	}

	header, err := keyfuncs.Header("x-api-key")
	if err != nil {
		t.Fatal(err)
	}
	keys = nil
	byMethod, err := core.New(memorystore.New(), "method", keyfuncs.Join(header, keyfuncs.Route()), []store.Limit{store.PerHour(1)}, record)
	if err != nil {
		t.Fatal(err)
	}
	conn = serve(t, byMethod, func(context.Context) error { return nil })
	for _, c := range []struct {
		method string
		want   codes.Code
	}{{"A", codes.OK}, {"B", codes.OK}, {"A", codes.ResourceExhausted}} {
		if err := callEcho(withKey("alice"), conn, c.method); status.Code(err) != c.want {
			t.Errorf("%s: %v, want %v", c.method, err, c.want)
		}
	}
	if len(keys) != 3 || !strings.Contains(keys[0], "/test.Echo/A") || !strings.Contains(keys[1], "/test.Echo/B") {
		t.Errorf("keys %q", keys)
	}
}

// WithCountIf counts calls by the HTTP status of their code, and the
// handler's context gives the Decision to core.FromContext.
func TestCountIfAndFromContext(t *testing.T) {
	header, err := keyfuncs.Header("x-api-key")
	if err != nil {
		t.Fatal(err)
	}
	l, err := core.New(memorystore.New(), "login", header, []store.Limit{store.PerHour(2)},
		core.WithCountIf(func(s int) bool { return s >= 400 }))
	if err != nil {
		t.Fatal(err)
	}
	var fail atomic.Bool
	var remaining atomic.Int64
	conn := serve(t, l, func(ctx context.Context) error {
		d, ok := core.FromContext(ctx)
		if !ok {
			return errors.New("no Decision in the handler's context")
		}
		remaining.Store(d.Result.Remaining)
		if fail.Load() {
			return status.Error(codes.Unauthenticated, "wrong password")
		}
		return nil
	})
	for i := 0; i < 5; i++ { // successes are given back
		if err := callEcho(withKey("alice"), conn, "A"); err != nil {
			t.Fatalf("success %d: %v", i, err)
		}
	}
	if remaining.Load() != 1 {
		t.Errorf("FromContext: remaining %d, want 1 (the call's own unit, given back after)", remaining.Load())
	}
	fail.Store(true)
	for i, want := range []codes.Code{codes.Unauthenticated, codes.Unauthenticated, codes.ResourceExhausted} {
		if err := callEcho(withKey("alice"), conn, "A"); status.Code(err) != want {
			t.Errorf("failure %d: %v, want %v", i, err, want)
		}
	}
}

// A MaxInFlight slot is released when the handler returns, also when it
// panics (the panic goes on), and a refusal without a key under
// KeyErrorDeny is PermissionDenied.
func TestReleaseAndCodes(t *testing.T) {
	header, err := keyfuncs.Header("x-api-key")
	if err != nil {
		t.Fatal(err)
	}
	l, err := core.New(memorystore.New(), "slots", header, []store.Limit{store.MaxInFlight(1, time.Minute)},
		core.WithKeyErrorRule(core.KeyErrorDeny, nil))
	if err != nil {
		t.Fatal(err)
	}
	icpt := grpclimit.UnaryServerInterceptor(l)
	info := &grpc.UnaryServerInfo{FullMethod: "/test.Echo/A"}
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-api-key", "alice"))
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the handler's panic did not go on")
			}
		}()
		_, _ = icpt(ctx, nil, info, func(context.Context, any) (any, error) { panic("boom") })
	}()
	held := make(chan struct{})
	release := make(chan struct{})
	go func() {
		_, _ = icpt(ctx, nil, info, func(context.Context, any) (any, error) { close(held); <-release; return nil, nil })
	}()
	<-held
	if _, err := icpt(ctx, nil, info, func(context.Context, any) (any, error) { return nil, nil }); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("second call in flight: %v", err)
	}
	close(release)
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := icpt(ctx, nil, info, func(context.Context, any) (any, error) { return nil, nil })
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the slot was not released: %v", err)
		}
		time.Sleep(time.Millisecond)
	}
	if _, err := icpt(context.Background(), nil, info, func(context.Context, any) (any, error) { return nil, nil }); status.Code(err) != codes.PermissionDenied {
		t.Errorf("no key under KeyErrorDeny: %v", err)
	}
}

func TestNilLimiterPanics(t *testing.T) {
	for _, f := range []func(){
		func() { grpclimit.UnaryServerInterceptor(nil) },
		func() { grpclimit.StreamServerInterceptor(nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Error("no panic for a nil Limiter")
				}
			}()
			f()
		}()
	}
}
