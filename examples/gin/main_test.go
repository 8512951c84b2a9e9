package main

import (
	"testing"

	"github.com/sluicehq/sluice/internal/exampleenv/exampletest"
)

func TestRoutes(t *testing.T) { exampletest.CheckRoutes(t, routes) }
