// Command reload serves with a limiter whose limits come from a file, and
// changes them while it serves, without a restart and without resetting
// the clients' counters of the limits that did not change.
//
// The file holds one limit per line, in store.ParseLimit's syntax; # starts
// a comment and blank lines are ignored:
//
//	# api: 10 per second, at most 1000 an hour
//	10/s burst 20
//	1000/h
//
// The limits are read again when the process gets SIGHUP, and when the
// file's modification time or size changes (checked every -poll). Each
// change is logged. A file that does not parse, or holds no limit, is
// reported and ignored: the limits in force stay.
//
//	go run ./examples/reload -limits examples/reload/limits.txt
//	curl -i http://127.0.0.1:8080/
//	echo '2/m' > examples/reload/limits.txt     # or: kill -HUP <pid>
//	curl -i http://127.0.0.1:8080/
package main
