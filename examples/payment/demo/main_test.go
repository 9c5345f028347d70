package main

import (
	"os"
	"testing"
	"time"

	"github.com/jetsaga/jetsaga/internal/testutil"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(workerEnv); spec != "" {
		worker(spec) // a copy of this binary, started by run as a worker
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestDemo charges 60 orders from three worker processes, one killed
// (SIGKILL) every 300 ms, through a payment service that loses 5% of its
// answers after charging: run checks that every order was charged exactly
// once and that its Paid event carries the service's charge.
func TestDemo(t *testing.T) {
	const orders = 60
	var out testutil.Buffer
	res, err := run(t.Context(), &out, options{Orders: orders, Workers: 3, KillEvery: 300 * time.Millisecond, Drop: 0.05})
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Charged) != orders || len(res.Paid) != orders {
		t.Errorf("%d orders charged, %d paid; want %d", len(res.Charged), len(res.Paid), orders)
	}
	if res.Kills == 0 {
		t.Error("no worker was killed: the demo did not test what it says")
	}
}
