package redisstore_test

import (
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core/redisstore"
)

// wrappedClient is a redis.UniversalClient of another type.
type wrappedClient struct{ redis.UniversalClient }

// A typed nil client (a nil *redis.Client in the interface) is an error
// from New, not a Store that panics at its first request.
func TestNewRefusesTypedNilClient(t *testing.T) {
	for name, c := range map[string]redis.UniversalClient{
		"nil":                  nil,
		"nil *redis.Client":    (*redis.Client)(nil),
		"nil *ClusterClient":   (*redis.ClusterClient)(nil),
		"nil *redis.Ring":      (*redis.Ring)(nil),
		"nil pointer of other": (*wrappedClient)(nil),
	} {
		s, err := redisstore.New(c)
		if err == nil || s != nil {
			t.Errorf("%s: New = %v, %v; want an error", name, s, err)
			continue
		}
		if !strings.HasPrefix(err.Error(), "redisstore: nil redis client") {
			t.Errorf("%s: unclear error %q", name, err)
		}
	}
}
