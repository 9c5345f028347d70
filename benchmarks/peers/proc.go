package main

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Process figures from /proc (Linux): CPU time in clock ticks and resident
// memory. Elsewhere they read as 0 and the table says so.

// clockTick is the unit of utime and stime in /proc/PID/stat (USER_HZ).
const clockTick = 10 * time.Millisecond

// procStat returns the fields of /proc/PID/stat after the command name:
// state, ppid, … (f[11] utime, f[12] stime), or nil.
func procStat(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
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

// cpuOf is the CPU time, user and system, that the processes have used.
func cpuOf(pids []int) time.Duration {
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

// children lists the processes whose parent is pid.
func children(pid int) []int {
	var out []int
	want := strconv.Itoa(pid)
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		p, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		if f := procStat(p); len(f) > 1 && f[1] == want {
			out = append(out, p)
		}
	}
	return out
}

// childrenNamed lists this process's children whose command is name.
func childrenNamed(name string) []int {
	var out []int
	for _, p := range children(os.Getpid()) {
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/comm"); err == nil && strings.TrimSpace(string(b)) == name {
			out = append(out, p)
		}
	}
	return out
}

// memory is resident memory in bytes: RSS, and PSS (shared pages divided
// among the processes that share them, so that postgres's shared buffers
// count once across its processes).
type memory struct{ RSS, PSS int64 }

// memOf sums the resident memory of the processes.
func memOf(pids []int) memory {
	var sum memory
	for _, pid := range pids {
		f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 2 {
				continue
			}
			kb, _ := strconv.ParseInt(fields[1], 10, 64)
			switch fields[0] {
			case "Rss:":
				sum.RSS += kb << 10
			case "Pss:":
				sum.PSS += kb << 10
			}
		}
		f.Close()
	}
	return sum
}
