package charttest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"
)

// The test binary re-executes itself as a small helper that gives a pod
// its own view of /etc/hosts before it becomes the pod's process: a mount
// namespace of its own, where a file mapping the pods' DNS names to
// loopback addresses is bind-mounted over /etc/hosts. Nothing outside the
// helper's namespace sees the change. The helper needs CAP_SYS_ADMIN,
// which a user namespace gives a non-root user where the kernel allows
// unprivileged user namespaces.
const (
	helperEnv     = "QUORUMBUS_CHARTTEST_POD_HELPER"
	helperHosts   = "QUORUMBUS_CHARTTEST_HOSTS"
	helperArgv    = "QUORUMBUS_CHARTTEST_ARGV"
	helperEnvList = "QUORUMBUS_CHARTTEST_ENV"
)

// RunHelperIfAsked turns the process into a pod's helper when the test
// binary was started as one; call it first in TestMain. Otherwise it
// returns at once.
func RunHelperIfAsked() {
	if os.Getenv(helperEnv) != "1" {
		return
	}
	var argv, env []string
	if err := json.Unmarshal([]byte(os.Getenv(helperArgv)), &argv); err != nil || len(argv) == 0 {
		helperFail("argv: %v", err)
	}
	if err := json.Unmarshal([]byte(os.Getenv(helperEnvList)), &env); err != nil {
		helperFail("env: %v", err)
	}
	// Keep the bind mount in this namespace: mounts under / are often
	// shared with the parent namespace.
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		helperFail("making / private: %v", err)
	}
	if err := syscall.Mount(os.Getenv(helperHosts), "/etc/hosts", "", syscall.MS_BIND, ""); err != nil {
		helperFail("bind-mounting the hosts file: %v", err)
	}
	err := syscall.Exec(argv[0], argv, env)
	helperFail("exec %s: %v", argv[0], err)
}

func helperFail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "charttest pod helper: "+format+"\n", args...)
	os.Exit(97)
}

// WriteHosts writes a hosts file that maps each name to its address.
func WriteHosts(path string, names map[string]string) error {
	var lines []string
	lines = append(lines, "127.0.0.1 localhost", "::1 localhost")
	for name, ip := range names {
		lines = append(lines, ip+" "+name)
	}
	sort.Strings(lines[2:])
	return os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644)
}

// Process is a pod's container running as a local process.
type Process struct {
	Name    string
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
}

// StartProcess runs argv with exactly env (no variable of the test's
// own), in a mount namespace where hostsPath is /etc/hosts; stdout and
// stderr go to logPath.
func StartProcess(name string, argv, env []string, hostsPath, logPath string) (*Process, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	argvJSON, _ := json.Marshal(argv)
	envJSON, _ := json.Marshal(env)
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	cmd := exec.Command(self)
	cmd.Env = []string{helperEnv + "=1", helperHosts + "=" + hostsPath, helperArgv + "=" + string(argvJSON), helperEnvList + "=" + string(envJSON)}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS,
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
	}
	if os.Geteuid() != 0 {
		cmd.SysProcAttr.Cloneflags |= syscall.CLONE_NEWUSER
		cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Geteuid(), Size: 1}}
		cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getegid(), Size: 1}}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s in a mount namespace: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Exited reports whether the process ended, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM, as the kubelet does, and SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) error {
	if exited, err := p.Exited(); exited {
		return err
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		return errors.New(p.Name + " did not stop within its grace period")
	}
	return nil
}

// Log is the process's output so far.
func (p *Process) Log() string {
	b, _ := os.ReadFile(p.LogPath)
	return string(b)
}
