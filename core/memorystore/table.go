package memorystore

import "math/rand/v2"

// A shard keeps its states in a table of its own rather than a Go map: open
// addressing with linear probing on the stateHash the key lookup has
// already computed, so that a lookup reads the slot and the state and
// nothing else (BenchmarkMemoryStoreTake). The table holds at most one
// state per hash; memoryShard.overflow holds the others.

// stateSlot is one slot of a shard's table: a stored state and its
// stateHash, or vacant.
type stateSlot struct {
	*memoryState // vacant when the slot is empty
	h            uint64
}

// vacant is the state of every empty slot. It is never stored nor written.
var vacant = new(memoryState)

// minTableSize is the number of slots of a shard's first table.
const minTableSize = 8

// home is the slot h is first looked for in, in a table of mask+1 slots.
// The lowest bits of a key's hash pick its shard; the next ones are free.
func home(h uint64, mask int) int { return int(h>>16) & mask }

// slotOf returns the index of the slot holding hash h, or -1. The caller
// holds mu.
func (sh *memoryShard) slotOf(h uint64) int {
	slots := sh.states
	mask := len(slots) - 1
	if mask < 0 {
		return -1
	}
	// The table is never full, so a vacant slot ends every probe.
	for i := home(h, mask); ; i = (i + 1) & mask {
		switch s := &slots[i]; {
		case s.memoryState == vacant:
			return -1
		case s.h == h:
			return i
		}
	}
}

// lookup returns the state stored in the table under h, or nil. The caller
// holds mu.
func (sh *memoryShard) lookup(h uint64) *memoryState {
	if i := sh.slotOf(h); i >= 0 {
		return sh.states[i].memoryState
	}
	return nil
}

// put stores st under h, which the table does not hold, growing the table
// to keep it at most three quarters full. The caller holds mu.
func (sh *memoryShard) put(h uint64, st *memoryState) {
	if 4*(sh.used+1) > 3*len(sh.states) {
		old := sh.states
		sh.states = newSlots(max(minTableSize, 2*len(old)))
		sh.used = 0
		for _, s := range old {
			if s.memoryState != vacant {
				sh.place(s)
			}
		}
	}
	sh.place(stateSlot{st, h})
}

// place stores s in the first vacant slot of its probe sequence.
func (sh *memoryShard) place(s stateSlot) {
	mask := len(sh.states) - 1
	i := home(s.h, mask)
	for sh.states[i].memoryState != vacant {
		i = (i + 1) & mask
	}
	sh.states[i] = s
	sh.used++
}

func newSlots(n int) []stateSlot {
	slots := make([]stateSlot, n)
	for i := range slots {
		slots[i].memoryState = vacant
	}
	return slots
}

// vacate empties slot i, moving back the states after it that their probe
// sequences allow, so that every stored state stays reachable from its
// home without tombstones. The caller holds mu.
func (sh *memoryShard) vacate(i int) {
	slots := sh.states
	mask := len(slots) - 1
	for j := (i + 1) & mask; slots[j].memoryState != vacant; j = (j + 1) & mask {
		// The state in j stays if its home lies cyclically in (i, j].
		k := home(slots[j].h, mask)
		if stays := (i <= j && i < k && k <= j) || (i > j && (i < k || k <= j)); !stays {
			slots[i] = slots[j]
			i = j
		}
	}
	slots[i] = stateSlot{memoryState: vacant}
	sh.used--
}

// sample calls visit on stored states of the table from a random slot on,
// until visit reports that it is done or every slot has been passed. visit
// may remove the state it is given. The caller holds mu.
func (sh *memoryShard) sample(visit func(*memoryState) bool) {
	if sh.used == 0 {
		return
	}
	mask := len(sh.states) - 1
	i := rand.IntN(len(sh.states))
	for passed := 0; passed <= mask; {
		if st := sh.states[i].memoryState; st != vacant {
			if visit(st) {
				return
			}
			if sh.states[i].memoryState != st {
				continue // removed: a later state may have moved into i
			}
		}
		i = (i + 1) & mask
		passed++
	}
}
