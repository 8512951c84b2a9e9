package sluice_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The HTTP adapters and the packages beside them never build gRPC: package
// grpclimit is a module of its own (issue 31, item 3). go list -deps of
// each package of this module names no google.golang.org/grpc package.
func TestNoGRPCInTheHTTPAdapters(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on the PATH")
	}
	out, err := exec.Command(gobin, "list", "-deps", "./...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps ./...: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 100 || !strings.Contains(string(out), "github.com/sluicehq/sluice/nethttp\n") {
		t.Fatalf("go list -deps listed %d packages, without nethttp", len(deps))
	}
	for _, p := range deps {
		if strings.HasPrefix(p, "google.golang.org/grpc") || strings.HasPrefix(p, "github.com/sluicehq/sluice/grpclimit") {
			t.Errorf("%s is built with this module's packages", p)
		}
	}
}
