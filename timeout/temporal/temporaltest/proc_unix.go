//go:build unix

package temporaltest

import (
	"os"
	"os/exec"
	"syscall"
)

// setProcessGroup puts the server in a process group of its own, so that
// a signal reaches whatever it started too.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	setPdeathsig(cmd.SysProcAttr)
}

func signalGroup(cmd *exec.Cmd, sig os.Signal) error {
	s, ok := sig.(syscall.Signal)
	if !ok {
		return cmd.Process.Signal(sig)
	}
	if err := syscall.Kill(-cmd.Process.Pid, s); err != nil && err != syscall.ESRCH {
		return err
	}
	return nil
}
