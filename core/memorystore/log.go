package memorystore

// logBlock is the number of entries of each block of a sliding log longer
// than one block.
const logBlock = 64

// logEntry is one admitted request of a sliding log: its stamp (µs) and
// the number of its first unit. Units are numbered consecutively, so an
// entry holds the units from its first to the next entry's first (the
// log's next, for the newest): a request of any cost is one entry, as in
// the Redis store's sorted set (ALGORITHMS.md).
type logEntry struct{ stamp, first int64 }

// slidingLog is a ring of entries, one per admitted request, in ascending
// stamps, allocated lazily and grown as needed up to the limit's Rate
// entries (each holds at least one live unit). A log of at most logBlock
// entries is one block, grown by doubling; a longer one is a ring of
// blocks of logBlock entries, grown by adding blocks, so that growing
// never copies entries and a key's newest entries lie in a small block
// allocated when they arrived (BenchmarkMemoryStoreTake's sliding_log
// cases). It keeps a copy of its oldest and newest stamps, so that a
// decision in which no entry leaves the window reads no block.
type slidingLog struct {
	buf         [][]logEntry // the ring of blocks; a block not reached yet is nil
	head        int          // position of the oldest entry in the ring
	count       int
	next        int64 // the number of the next unit
	first, last int64 // the oldest and newest stamps, when count > 0
}

func (l *slidingLog) len() int {
	if l == nil {
		return 0
	}
	return l.count
}

// cap is the number of entries the ring holds.
func (l *slidingLog) cap() int {
	if len(l.buf) == 1 {
		return len(l.buf[0])
	}
	return len(l.buf) * logBlock
}

// pos is the position in the ring of the i-th oldest entry, 0 ≤ i < cap.
func (l *slidingLog) pos(i int) int {
	p := l.head + i
	if c := l.cap(); p >= c {
		p -= c
	}
	return p
}

// at returns the i-th oldest entry, 0 ≤ i < len.
func (l *slidingLog) at(i int) logEntry {
	p := l.pos(i)
	return l.buf[p/logBlock][p%logBlock]
}

// firstAfter returns the index of the oldest entry stamped later than cut
// (len when there is none), by binary search.
func (l *slidingLog) firstAfter(cut int64) int {
	lo, hi := 0, l.len()
	if hi == 0 || l.first > cut {
		return 0 // nothing has left the window: the usual case
	}
	lo = 1
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if l.at(mid).stamp > cut {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

// units returns the units the entries from the start-th oldest on hold.
func (l *slidingLog) units(start int) int64 {
	if start >= l.len() {
		return 0
	}
	return l.next - l.at(start).first
}

// stampOf returns the stamp of the entry that holds unit u (0-based) of
// those the entries from the start-th oldest on hold, u < units(start):
// the last entry whose first unit is at most the start-th's first + u.
func (l *slidingLog) stampOf(start int, u int64) int64 {
	want := l.at(start).first + u
	lo, hi := start, l.count-1
	for lo < hi {
		mid := int(uint(lo+hi+1) >> 1)
		if l.at(mid).first <= want {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return l.at(lo).stamp
}

func (l *slidingLog) reset() { l.head, l.count, l.next = 0, 0, 0 }

// commit drops the entries before start and, when n > 0, appends one
// entry of n units stamped t. The caller guarantees len-start+1 ≤ rate.
func (l *slidingLog) commit(start int, n, t, rate int64) {
	if start > 0 {
		l.head = l.pos(start)
		l.count -= start
		if l.count > 0 {
			l.first = l.at(0).stamp
		}
	}
	need := l.count
	if n > 0 {
		need++
	}
	switch c := l.cap(); {
	case need > c:
		l.resize(min(max(2*c, 8, need), int(rate)))
	case c >= 1024 && need <= c/4:
		// A burst long past: give back half, so an idle key does not hold
		// its largest ring for as long as it lives.
		l.resize(c / 2)
	}
	if n == 0 {
		return
	}
	p := l.pos(l.count)
	b := &l.buf[p/logBlock]
	if *b == nil {
		*b = make([]logEntry, logBlock)
	}
	(*b)[p%logBlock] = logEntry{stamp: t, first: l.next}
	if l.count == 0 {
		l.first = t
	}
	l.last, l.count, l.next = t, need, l.next+n
}

// resize makes the ring hold size entries (at least count, rounded up to
// whole blocks past one block), keeping the entries in order.
func (l *slidingLog) resize(size int) {
	if size <= logBlock || len(l.buf) <= 1 {
		l.copyTo(size)
		return
	}
	// Blocks to blocks: the blocks move, oldest first, and no entry does,
	// but those that had wrapped into the front of the head's block.
	old, headBlock := l.buf, l.head/logBlock
	l.buf = make([][]logEntry, (size+logBlock-1)/logBlock)
	for j := range min(len(old), len(l.buf)) {
		l.buf[j] = old[(headBlock+j)%len(old)]
	}
	l.head %= logBlock
	if wrapped := l.head + l.count - len(old)*logBlock; wrapped > 0 {
		b := make([]logEntry, logBlock)
		copy(b, l.buf[0][:wrapped])
		l.buf[len(old)] = b
	}
}

// copyTo moves the entries, oldest first, to a new ring of size entries:
// one block when size ≤ logBlock, else blocks allocated as they fill.
func (l *slidingLog) copyTo(size int) {
	var buf [][]logEntry
	if size <= logBlock {
		buf = [][]logEntry{make([]logEntry, size)}
	} else {
		buf = make([][]logEntry, (size+logBlock-1)/logBlock)
	}
	for i := range l.count {
		if buf[i/logBlock] == nil {
			buf[i/logBlock] = make([]logEntry, logBlock)
		}
		buf[i/logBlock][i%logBlock] = l.at(i)
	}
	l.buf, l.head = buf, 0
}

// remove takes out up to n units of the entries of the oldest stamp at or
// after stamp, when that stamp is after cut (live): the units a request
// charged at stamp wrote (ALGORITHMS.md), taken from the last entries of
// that stamp. The entries from there on are renumbered so that units stay
// consecutive; an entry left without units goes.
func (l *slidingLog) remove(stamp, n, cut int64) {
	i := l.firstAfter(max(stamp, cut+1) - 1)
	if i >= l.count {
		return
	}
	type span struct{ stamp, units int64 }
	rest := make([]span, l.count-i)
	for e := range rest {
		end := l.next
		if i+e+1 < l.count {
			end = l.at(i + e + 1).first
		}
		rest[e] = span{l.at(i + e).stamp, end - l.at(i+e).first}
	}
	j := 0 // the entries of the oldest stamp
	for j < len(rest) && rest[j].stamp == rest[0].stamp {
		j++
	}
	for e := j - 1; e >= 0 && n > 0; e-- {
		d := min(n, rest[e].units)
		rest[e].units -= d
		n -= d
	}
	next, k := l.at(i).first, i
	for _, e := range rest {
		if e.units > 0 {
			p := l.pos(k)
			l.buf[p/logBlock][p%logBlock] = logEntry{stamp: e.stamp, first: next}
			next += e.units
			k++
		}
	}
	l.count, l.next = k, next
	if l.count > 0 {
		l.first, l.last = l.at(0).stamp, l.at(l.count-1).stamp
	}
}
