package main

// contenders lists everything the bench can run, peers and baselines first.
func contenders() []impl {
	return peerImpls()
}
