package otellimit_test

import "testing"

func TestStoreWarning(t *testing.T) {
	r, rd := newRecorder(t)
	r.StoreWarning("eviction")
	r.StoreWarning("eviction")
	r.StoreWarning("restart")
	got := series(t, rd, "sluice.store.warnings")
	if len(got) != 2 || got[`kind="eviction"`] != 2 || got[`kind="restart"`] != 1 {
		t.Errorf("store.warnings: %v, want eviction 2, restart 1", got)
	}
}
