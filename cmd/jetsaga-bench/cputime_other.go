//go:build !unix

package main

import "time"

// processCPU is not measured here; the CPU figures read "n/a".
func processCPU() time.Duration { return 0 }
