// Command natschild is the server child of transport/embedded.StartProcess,
// built on its own so that it can be built without the race detector while
// the tests that start it are built with it: scripts/test builds it and
// names it in JETSAGA_EMBEDDED_NATS_BIN (embedded.ChildBinEnv). Run by hand
// it exits at once with status 2.
package main

import (
	"fmt"
	"os"

	"github.com/jetsaga/jetsaga/transport/embedded"
)

func main() {
	embedded.RunChildIfRequested()
	fmt.Fprintf(os.Stderr, "natschild: run by transport/embedded.StartProcess only (%s unset)\n", embedded.ChildBinEnv)
	os.Exit(2)
}
