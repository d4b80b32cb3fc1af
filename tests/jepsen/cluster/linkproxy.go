package cluster

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
)

// LinkProxy is a running cmd/linkproxy: a toxiproxy proxy in front of one
// node, in that node's network namespace, that every peer and the
// front-end reach the node through. Toxics added to it act on every link
// into and out of the node; a cut of the network still acts on the
// packets between the members (the proxy's listener is on the node's
// address). The proxy outlives the node's restarts: while the node is
// down, a connection to it is accepted and closed at once instead of
// refused.
type LinkProxy struct {
	mu  sync.Mutex
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

// StartLinkProxy starts bin as member m, listening on listen and
// forwarding to upstream; its errors go to the file at logPath.
func StartLinkProxy(net Network, m int, bin, listen, upstream, logPath string) (*LinkProxy, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := net.Command(m, bin, "-listen", listen, "-upstream", upstream)
	cmd.Stderr = f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	in, err := cmd.StdinPipe()
	if err != nil {
		f.Close()
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, err
	}
	go func() { cmd.Wait(); f.Close() }()
	lp := &LinkProxy{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	if err := lp.answer(); err != nil { // "ok" once it listens
		lp.Stop()
		return nil, fmt.Errorf("linkproxy %s -> %s: %w", listen, upstream, err)
	}
	return lp, nil
}

// Do sends one command (cmd/linkproxy's doc) and waits for its answer.
func (lp *LinkProxy) Do(command string) error {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if _, err := io.WriteString(lp.in, command+"\n"); err != nil {
		return err
	}
	return lp.answer()
}

func (lp *LinkProxy) answer() error {
	if !lp.out.Scan() {
		if err := lp.out.Err(); err != nil {
			return err
		}
		return io.ErrUnexpectedEOF
	}
	line := lp.out.Text()
	if line == "ok" {
		return nil
	}
	return fmt.Errorf("linkproxy: %s", strings.TrimPrefix(line, "err "))
}

// Stop ends the proxy: its stdin closes, then it is killed.
func (lp *LinkProxy) Stop() {
	lp.in.Close()
	syscall.Kill(-lp.cmd.Process.Pid, syscall.SIGKILL)
}
