package redisstore

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/lua"
)

// source returns the text of the script file name in package lua.
func source(name string) string {
	b, err := lua.FS.ReadFile(name)
	if err != nil {
		panic("redisstore: missing script " + name) // the files are embedded: a build error
	}
	return string(b)
}

// The scripts the Store runs. What several share is written once and put
// before each (see package lua): lib.lua before the take, refund, lock and
// lease scripts, lean.lua around each lean part (leanScript). Each
// algorithm's file (algorithmFiles) holds its one definition of how a state
// answers a cost, in three parts (see algorithm): how it decides and
// charges, which the general scripts (take, refund, lease) and its lean
// script run after; the general scripts' part (how it gives back, and its
// entry in lib.lua's ALG, through which take.lua and refund.lua dispatch),
// which the general scripts run after; and its lean script (leanScript, from
// its row of families). A lean script (and its batch script) gets only its
// algorithm's definitions: every function a script defines is a closure
// built on each call; the general scripts run those of the algorithms a
// call names only (definitions). The take script and each lean script
// have a batch script, the same text with the driver for a batch (see
// drivers) after batch.lua. Each charging script also runs inside
// record.lua (recorded), as its recorded twin.
var (
	libSource                   = source("lib.lua")
	general                     = libSource + definitions()
	takeSource                  = general + takeHead + takeOne
	takeBatch                   = general + takeHead + source("batch.lua") + takeMany
	refundSource                = general + source("refund.lua")
	lockSource                  = libSource + source("lock.lua")
	leaseSource                 = general + source("lease.lua")
	fenceSource                 = source("fence.lua")
	takeHead, takeOne, takeMany = drivers(source("take.lua"))
)

// algorithmFiles are the files of package lua that define an algorithm
// (one or two: tat.lua serves GCRA and LeakyBucket): those with a giveMark.
var algorithmFiles = func() (names []string) {
	files, err := lua.FS.ReadDir(".")
	if err != nil {
		panic("redisstore: " + err.Error()) // the files are embedded: a build error
	}
	for _, f := range files {
		if strings.Contains(source(f.Name()), giveMark) {
			names = append(names, f.Name())
		}
	}
	return names
}()

// The lines of an algorithm's file where its general scripts' part (its
// give-backs and its entry in ALG) and its lean script start.
const (
	giveMark = "-- (the general scripts' part starts here)\n"
	leanMark = "-- (the lean script starts here)\n"
)

// algorithm returns the three parts of the algorithm file name: above
// giveMark, how its state decides and takes a cost; between the marks,
// the general scripts' part; below leanMark, its lean script.
func algorithm(name string) (defs, gives, lean string) {
	defs, rest, ok := strings.Cut(source(name), giveMark)
	gives, lean, ok2 := strings.Cut(rest, leanMark)
	if !ok || !ok2 {
		panic("redisstore: " + name + " lacks a give or lean mark")
	}
	return defs, gives, lean
}

// definitions returns every algorithm's definitions and general part,
// each file's as a branch of lib.lua's define, taken for the codes whose
// entries in ALG the file fills: a call runs the definitions of the
// algorithms it names only.
func definitions() string {
	var b strings.Builder
	b.WriteString("define = function(a)\n")
	for i, f := range algorithmFiles {
		d, g, _ := algorithm(f)
		codes := algEntry.FindAllStringSubmatch(g, -1)
		if len(codes) == 0 {
			panic("redisstore: " + f + " fills no entry of ALG")
		}
		if i > 0 {
			b.WriteString("else")
		}
		b.WriteString("if ")
		for j, c := range codes {
			if j > 0 {
				b.WriteString(" or ")
			}
			b.WriteString("a == '" + c[1] + "'")
		}
		b.WriteString(" then\n")
		b.WriteString(d)
		b.WriteString(g)
	}
	b.WriteString("end\nend\n")
	return b.String()
}

// algEntry finds the codes whose entries an algorithm file's general part
// fills: its lines "ALG.<code> = ".
var algEntry = regexp.MustCompile(`(?m)^ALG\.(\w+) = `)

// The line of lean.lua where the algorithm's lean part goes, and those of
// lean.lua and take.lua where their drivers for one call and for a batch
// start.
const (
	partMark  = "-- (the algorithm's lean part runs here)\n"
	oneMark   = "-- (one call)\n"
	batchMark = "-- (a batch)\n"
)

// drivers cuts src, the text of lean.lua's tail or of take.lua, at the
// marks of its drivers: what both run, the driver for one call, and the
// driver for a batch, which runs after batch.lua.
func drivers(src string) (head, one, many string) {
	head, rest, ok := strings.Cut(src, oneMark)
	one, many, ok2 := strings.Cut(rest, batchMark)
	if !ok || !ok2 {
		panic("redisstore: a script lacks a driver mark")
	}
	return head, one, many
}

// leanScript returns the lean script of the algorithm file name, with its
// recorded twin and its batch script, built once per file (GCRA and
// LeakyBucket share tat.lua's): the algorithm's definitions, then lean.lua
// with the algorithm's lean part as the body of its function lean, then
// lean.lua's driver for one call or for a batch. Both are built from the
// same text: a batch decides each call with the lean script's own code.
// mget: the state is a string, which the batch reads for all its keys
// with one MGET and passes to the lean part (pre).
func leanScript(name string, mget bool) *script {
	if s := leanScripts[name]; s != nil {
		return s
	}
	d, _, l := algorithm(name)
	open, rest, ok := strings.Cut(source("lean.lua"), partMark)
	if !ok {
		panic("redisstore: lean.lua lacks a mark")
	}
	end, single, many := drivers(rest)
	head := d + open + leanMark + l + end
	s := batching(charging(head+single), head+source("batch.lua")+"local mget = "+strconv.FormatBool(mget)+"\n"+many)
	leanScripts[name] = s
	return s
}

// leanScripts are the lean scripts built, by file.
var leanScripts = map[string]*script{}

// recordMark is the line of record.lua where the script it wraps runs.
const recordMark = "-- (the script runs here)\n"

// recorded returns src run inside record.lua: its calls are recorded, so
// that one whose reply was lost can be sent again and settled (see
// record.go).
func recorded(src string) string {
	head, tail, ok := strings.Cut(source("record.lua"), recordMark)
	if !ok {
		panic("redisstore: record.lua has no " + recordMark)
	}
	return head + src + "\n" + tail
}

// The shape of the take script's arguments and reply (see package lua).
const (
	keysPerLimit    = 2  // state key, lock key
	argsPerLimit    = 6  // code, R, P, B, T, L
	repliesPerLimit = 4  // the algorithm's three integers (a lean reply's), the lock
	retryNever      = -1 // the lease script's retry figure of a cost that can never pass
	// maxCost is the largest cost the scripts take; every limit's capacity
	// is below it, so a larger cost is sent as maxCost with the same outcome.
	maxCost = 1 << 53
	// leaseReplies is the number of integers of the lease script's reply:
	// granted, the limit's three (as take's), window, window left.
	leaseReplies = 6
)

// resentArg, sent in place of a script call's cost (ARGV[1] of the take
// and lean scripts, ARGV[6] of the lease script), makes the script refuse
// the call with an error whose text starts with resentError, reading and
// writing nothing: see once.
const (
	resentArg   = "resent"
	resentError = "SLUICE re-sent call refused"
)
