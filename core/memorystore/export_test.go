package memorystore

// Len returns the number of states s holds, expired ones not yet
// reclaimed included.
func Len(s *Store) int { return s.len() }
