package main

// contenders lists everything the bench can run: peers and baselines, then
// sluice's Redis store and memory store for each algorithm.
func contenders() []impl {
	return append(peerImpls(), sluiceImpls()...)
}
