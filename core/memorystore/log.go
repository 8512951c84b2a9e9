package memorystore

// logBlock is the number of entries of each block of a sliding log longer
// than one block.
const logBlock = 64

// slidingLog is a ring of ascending timestamps (µs), allocated lazily and
// grown as needed up to the limit's Rate entries. A log of at most logBlock
// entries is one block, grown by doubling; a longer one is a ring of
// blocks of logBlock entries, grown by adding blocks, so that growing
// never copies entries and a key's newest entries lie in a small block
// allocated when they arrived (BenchmarkMemoryStoreTake's sliding_log
// cases). It keeps a copy of its oldest and newest entries, so that a
// decision in which no entry leaves the window reads no block.
type slidingLog struct {
	buf         [][]int64 // the ring of blocks; a block not reached yet is nil
	head        int       // position of the oldest entry in the ring
	count       int
	first, last int64 // the oldest and newest entries, when count > 0
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
func (l *slidingLog) at(i int) int64 {
	p := l.pos(i)
	return l.buf[p/logBlock][p%logBlock]
}

// firstAfter returns the index of the oldest entry later than cut (len
// when there is none), by binary search.
func (l *slidingLog) firstAfter(cut int64) int {
	lo, hi := 0, l.len()
	if hi == 0 || l.first > cut {
		return 0 // nothing has left the window: the usual case
	}
	lo = 1
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if l.at(mid) > cut {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return lo
}

func (l *slidingLog) reset() { l.head, l.count = 0, 0 }

// commit drops the entries before start and appends n entries stamped t.
// The caller guarantees len-start+n ≤ rate.
func (l *slidingLog) commit(start int, n, t, rate int64) {
	if start > 0 {
		l.head = l.pos(start)
		l.count -= start
		if l.count > 0 {
			l.first = l.at(0)
		}
	}
	need := l.count + int(n)
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
	for i := l.count; i < need; i++ {
		p := l.pos(i)
		b := &l.buf[p/logBlock]
		if *b == nil {
			*b = make([]int64, logBlock)
		}
		(*b)[p%logBlock] = t
	}
	if l.count == 0 {
		l.first = t
	}
	l.last, l.count = t, need
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
	l.buf = make([][]int64, (size+logBlock-1)/logBlock)
	for j := range min(len(old), len(l.buf)) {
		l.buf[j] = old[(headBlock+j)%len(old)]
	}
	l.head %= logBlock
	if wrapped := l.head + l.count - len(old)*logBlock; wrapped > 0 {
		b := make([]int64, logBlock)
		copy(b, l.buf[0][:wrapped])
		l.buf[len(old)] = b
	}
}

// copyTo moves the entries, oldest first, to a new ring of size entries:
// one block when size ≤ logBlock, else blocks allocated as they fill.
func (l *slidingLog) copyTo(size int) {
	var buf [][]int64
	if size <= logBlock {
		buf = [][]int64{make([]int64, size)}
	} else {
		buf = make([][]int64, (size+logBlock-1)/logBlock)
	}
	for i := range l.count {
		if buf[i/logBlock] == nil {
			buf[i/logBlock] = make([]int64, logBlock)
		}
		buf[i/logBlock][i%logBlock] = l.at(i)
	}
	l.buf, l.head = buf, 0
}
