// Package redistest starts real redis-server processes for sluice's tests:
// a single server (StartServer), a Redis Cluster with optional replicas
// (StartCluster), and one server or cluster shared by every test of a test
// binary (Shared, SharedCluster).
//
// Every process listens on a free 127.0.0.1 port, keeps no data on disk
// (--save "" --appendonly no) and is ready when the start function returns:
// a server answers commands, a cluster has all 16384 slots assigned, every
// node agrees on who serves them and every replica is linked to its master.
// A test never talks to a Redis it did not start, so tests may run in
// parallel and across packages.
//
// # Lifetime
//
// Processes from StartServer and StartCluster are killed by tb.Cleanup. On
// Linux every process is also started with a parent-death signal (SIGKILL),
// so it dies with the test binary even when the binary is killed, panics or
// hits the -timeout. That signal is also the only cleanup of the processes
// behind Shared and SharedCluster: they live until the test binary exits.
// Their small working directories (os.TempDir()/sluice-redistest-<pid>-*)
// are removed by the next test binary that starts a shared process.
//
// # Missing redis-server
//
// The binary is found with exec.LookPath("redis-server"), or the path in the
// environment variable SLUICE_REDIS_SERVER. When it cannot be found the test
// is skipped, except when the environment variable CI is true: then the test
// fails, so a CI run never passes by skipping. On Debian and Ubuntu the
// binary comes with the package redis-server.
//
// # Slow tests
//
// Slow(tb) skips a test unless Full: the environment variable CI is true or
// SLUICE_FULL is 1. It marks the tests that take seconds or hinge on timing
// (fault injection, breakers, cluster resharding and failover, Sentinel),
// so that the default go test ./... stays quick on a busy machine while CI
// (.ci/run sets both variables) runs everything. Under CI=true Slow never
// skips.
//
// # Waiting
//
// WaitUntil polls a condition until it holds or a time passes: the one
// way sluice's tests wait for something to happen (a server to apply a
// change, a background pass to finish, a breaker to open), not a sleep.
//
// # Concurrency
//
// All functions and methods may be called from parallel tests. Kill,
// Restart, Freeze and Thaw of one Server are serialised; a test that kills a
// node must not share it: the Servers behind Shared and SharedCluster refuse
// to be killed, restarted or frozen.
package redistest
