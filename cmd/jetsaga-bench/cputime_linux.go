//go:build linux

package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of utime and stime in /proc/PID/stat (USER_HZ,
// 100 on every Linux port Go supports).
const clockTick = 10 * time.Millisecond

// childrenCPU returns a function that reports the CPU time, user and
// system, that this process's children running now (the nodes of a
// cluster just started) have used, read from /proc in clock ticks: 10 ms
// per process and reading.
func childrenCPU() func() time.Duration {
	self := strconv.Itoa(os.Getpid())
	var pids []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		if f := procStat(filepath.Base(d)); len(f) > 1 && f[1] == self {
			pids = append(pids, filepath.Base(d))
		}
	}
	return func() time.Duration {
		var sum time.Duration
		for _, pid := range pids {
			f := procStat(pid)
			if len(f) < 13 {
				continue
			}
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			sum += time.Duration(u+s) * clockTick
		}
		return sum
	}
}

// procStat returns the fields of /proc/PID/stat after the command name:
// state, ppid, … (f[11] utime, f[12] stime), or nil.
func procStat(pid string) []string {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return nil
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(s[i+1:])
}
