//go:build unix && !linux

package temporaltest

import "syscall"

func setPdeathsig(a *syscall.SysProcAttr) {}
