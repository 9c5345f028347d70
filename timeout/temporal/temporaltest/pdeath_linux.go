package temporaltest

import "syscall"

// setPdeathsig kills the server if the test binary dies without stopping
// it (a test timeout, say).
func setPdeathsig(a *syscall.SysProcAttr) { a.Pdeathsig = syscall.SIGKILL }
