package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is one member's process across its restarts: the same command
// line each time, its output appended to one log file.
type Process struct {
	Name   string
	net    Network
	member int
	bin    string
	args   []string
	log    string
	// env, when set, gives the variables of each start (a node's clock
	// offset and machine boot id change between starts).
	env   func() []string
	proxy *LinkProxy // the node's link proxy, if any

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	paused  bool
	crashes int // exits the harness did not cause
}

// Start starts the process. It runs in a process group of its own, so
// that signals reach it and nothing else, and it dies with the harness
// (Pdeathsig) if the harness is killed before its cleanup.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s: already running", p.Name)
	}
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	fmt.Fprintf(f, "=== start %s\n", time.Now().UTC().Format(time.RFC3339Nano))
	cmd := p.net.Command(p.member, p.bin, p.args...)
	if p.env != nil {
		if env := p.env(); len(env) > 0 {
			cmd.Env = append(os.Environ(), env...)
			fmt.Fprintf(f, "=== env %s\n", strings.Join(env, " "))
		}
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		f.Close()
		close(done)
	}()
	p.cmd, p.done, p.paused = cmd, done, false
	return nil
}

// Running says whether the process was started and not killed since.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil
}

// Kill sends SIGKILL to the process group and waits for the process: no
// shutdown, no flush, as a crash.
func (p *Process) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	p.noteCrash()
	syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	p.cmd, p.paused = nil, false
}

// machineCrashExit is the status a node built with -tags chaostest exits
// with after it simulated its machine's crash (cmd/quorumbus/cluster/chaos.go).
const machineCrashExit = 86

// CrashMachine has a node that simulates its machine crash it (SIGUSR1):
// it loses what its logs have not fsynced and exits. It returns the
// node's own account of what it lost, from its log. A node that has not
// exited 10 s later is killed, and that is an error.
func (p *Process) CrashMachine() (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return "", fmt.Errorf("%s: not running", p.Name)
	}
	p.noteCrash()
	pg := -p.cmd.Process.Pid
	if p.paused {
		syscall.Kill(pg, syscall.SIGCONT)
	}
	// Only the node's process gets the signal: ip netns exec has exec'ed it.
	syscall.Kill(p.cmd.Process.Pid, syscall.SIGUSR1)
	var err error
	select {
	case <-p.done:
		if code := p.cmd.ProcessState.ExitCode(); code != machineCrashExit {
			err = fmt.Errorf("%s: exited with status %d on SIGUSR1, not %d: not a simulated machine crash (built without -tags chaostest?)", p.Name, code, machineCrashExit)
		}
	case <-time.After(10 * time.Second):
		syscall.Kill(pg, syscall.SIGKILL)
		<-p.done
		err = fmt.Errorf("%s: still running 10 s after SIGUSR1; killed", p.Name)
	}
	p.cmd, p.paused = nil, false
	return lastLine(p.log, "chaos: machine crash"), err
}

// lastLine returns the last line of the file at path that contains sub.
func lastLine(path, sub string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var last string
	for line := range strings.Lines(string(b)) {
		if strings.Contains(line, sub) {
			last = strings.TrimSpace(line)
		}
	}
	return last
}

// Pause stops the process (SIGSTOP), as a frozen virtual machine.
func (p *Process) Pause() error { return p.signal(syscall.SIGSTOP, true) }

// Resume lets a paused process go on (SIGCONT).
func (p *Process) Resume() error { return p.signal(syscall.SIGCONT, false) }

func (p *Process) signal(sig syscall.Signal, paused bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return fmt.Errorf("%s: not running", p.Name)
	}
	p.paused = paused
	return syscall.Kill(-p.cmd.Process.Pid, sig)
}

// Paused says whether the process is stopped by Pause.
func (p *Process) Paused() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paused
}

// Exited says whether the process ended by itself (not by Kill): a
// crash the run must report.
func (p *Process) Exited() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Stop ends the process for good at cleanup: SIGCONT in case it is
// paused, SIGTERM, then SIGKILL if it has not exited within 10 s.
func (p *Process) Stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	p.noteCrash()
	pg := -p.cmd.Process.Pid
	syscall.Kill(pg, syscall.SIGCONT)
	syscall.Kill(pg, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		syscall.Kill(pg, syscall.SIGKILL)
		<-p.done
	}
	p.cmd = nil
}

// noteCrash counts an exit that happened before the harness ended the
// process: otherwise a later kill fault would hide it. p.mu is held.
func (p *Process) noteCrash() {
	select {
	case <-p.done:
		p.crashes++
	default:
	}
}

// Crashes counts the times the process exited without the harness
// killing or stopping it (its log says why).
func (p *Process) Crashes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := p.crashes
	if p.cmd != nil {
		select {
		case <-p.done:
			n++ // exited and not restarted yet
		default:
		}
	}
	return n
}
