package loadtool

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuMeter reports where the CPU went during a bench run: the load tool's
// own, a local server's (by pid) and the whole machine's. On a box where the
// client and the cluster share the cores, msgs/s alone does not tell
// whether the broker or the client ran out of CPU, or neither did: a
// receive + complete through go-amqp costs the client about as much CPU as
// a replica's share of the broker.
type cpuMeter struct {
	serverPid int
	self      time.Duration
	server    time.Duration // < 0: not known
	busy      time.Duration // < 0: not known
	steal     time.Duration
}

// clockTick is the unit of /proc's CPU times: USER_HZ, 100 on every Linux
// architecture Go supports.
const clockTick = 10 * time.Millisecond

// SelfCPU is the CPU time (user and system) this process has used; 0 if
// the kernel will not say.
func SelfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func startCPUMeter(serverPid int) *cpuMeter {
	m := &cpuMeter{serverPid: serverPid}
	m.self, m.server, m.busy, m.steal = m.read()
	return m
}

func (m *cpuMeter) read() (self, server, busy, steal time.Duration) {
	self = SelfCPU()
	server = -1
	if m.serverPid > 0 {
		server = processCPU(m.serverPid)
	}
	busy, steal = machineCPU()
	return self, server, busy, steal
}

// report prints the CPU spent since the meter started, per message and in
// cores.
func (m *cpuMeter) report(out io.Writer, msgs int64, elapsed time.Duration) {
	self, server, busy, steal := m.read()
	if msgs <= 0 || elapsed <= 0 {
		return
	}
	perMsg := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(msgs) }
	cores := func(d time.Duration) float64 { return d.Seconds() / elapsed.Seconds() }
	d := self - m.self
	fmt.Fprintf(out, "cpu: load tool %.1f µs/msg (%.2f cores)", perMsg(d), cores(d))
	if server >= 0 && m.server >= 0 {
		d := server - m.server
		fmt.Fprintf(out, "  server %.1f µs/msg (%.2f cores)", perMsg(d), cores(d))
	}
	if busy >= 0 && m.busy >= 0 {
		// Time the hypervisor gave to other guests: a run that lost
		// much of it measured the neighbours, not the broker.
		fmt.Fprintf(out, "  machine %.2f of %d cores busy, %.2f stolen", cores(busy-m.busy), runtime.NumCPU(), cores(steal-m.steal))
	}
	fmt.Fprintln(out)
}

// processCPU returns the user and system time of process pid from
// /proc/<pid>/stat, or -1.
func processCPU(pid int) time.Duration {
	p, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return -1
	}
	// The command name (field 2) may hold spaces; the fields after its
	// closing parenthesis are plain. utime and stime are fields 14 and 15.
	i := strings.LastIndexByte(string(p), ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(p[i+1:]))
	if len(f) < 13 {
		return -1
	}
	u, err1 := strconv.ParseInt(f[11], 10, 64)
	s, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(u+s) * clockTick
}

// machineCPU returns, from /proc/stat, the CPU time all cores spent on
// anything but idle, I/O wait and steal since boot, and the time the
// hypervisor stole; -1 and -1 when unknown.
func machineCPU() (busy, steal time.Duration) {
	p, err := os.ReadFile("/proc/stat")
	if err != nil {
		return -1, -1
	}
	line, _, _ := strings.Cut(string(p), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return -1, -1
	}
	var b int64
	for i, v := range f[1:9] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return -1, -1
		}
		// user nice system idle iowait irq softirq steal (guest time,
		// after these, is already in user).
		switch i {
		case 3, 4:
		case 7:
			steal = time.Duration(n) * clockTick
		default:
			b += n
		}
	}
	return time.Duration(b) * clockTick, steal
}
