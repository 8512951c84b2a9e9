package lua

import "embed"

// FS holds the scripts, one .lua file each.
//
//go:embed *.lua
var FS embed.FS
