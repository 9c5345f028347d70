//go:build !unix

package temporaltest

import (
	"os"
	"os/exec"
)

func setProcessGroup(cmd *exec.Cmd) {}

func signalGroup(cmd *exec.Cmd, sig os.Signal) error {
	if sig == os.Interrupt {
		sig = os.Kill // no SIGINT on Windows
	}
	return cmd.Process.Signal(sig)
}
