package scenario

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/flotilla/flotilla/internal/waitfor"
)

// nsPrefix starts the name of every network namespace the scenarios make:
// flsc-<test process id>-<scenario number>-<node>. The process ID lets a
// later run remove what a killed run left behind.
const nsPrefix = "flsc-"

// network is one scenario's network: a hub namespace holding a bridge, one
// namespace per node with a veth to the bridge, and a veth from the root
// namespace (where the test runs) to the bridge, all in 10.77.<subnet>.0/24.
// The root namespace keeps its own iptables rules untouched: the bridge and
// its forwarding live in the hub namespace, which a fresh namespace lets
// through.
type network struct {
	tag    string // flsc-<pid>-<n>
	subnet int    // the third octet
	hub    string
	nodes  []string // namespaces made, to remove
}

// run runs a command and returns an error carrying its output.
func run(name string, args ...string) error {
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
}

// inNS runs a command inside network namespace ns.
func inNS(ns string, args ...string) error {
	return run("ip", append([]string{"netns", "exec", ns}, args...)...)
}

// newNetwork makes the hub namespace and the root's link to it. On error
// whatever was made is removed.
func newNetwork(tag string) (_ *network, err error) {
	subnet, err := freeSubnet()
	if err != nil {
		return nil, err
	}
	n := &network{tag: tag, subnet: subnet, hub: tag + "-hub"}
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	if err := run("ip", "netns", "add", n.hub); err != nil {
		return nil, err
	}
	root := n.rootLink()
	steps := [][]string{
		{"ip", "netns", "exec", n.hub, "ip", "link", "add", "br0", "type", "bridge"},
		{"ip", "netns", "exec", n.hub, "ip", "link", "set", "br0", "up"},
		{"ip", "netns", "exec", n.hub, "ip", "link", "set", "lo", "up"},
		{"ip", "link", "add", root, "type", "veth", "peer", "name", "root", "netns", n.hub},
		{"ip", "netns", "exec", n.hub, "ip", "link", "set", "root", "master", "br0", "up"},
		{"ip", "addr", "add", n.ip(254) + "/24", "dev", root},
		{"ip", "link", "set", root, "up"},
	}
	for _, s := range steps {
		if err := run(s[0], s[1:]...); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// rootLink is the name of the root namespace's end of its veth (at most 15
// characters, unique per network).
func (n *network) rootLink() string {
	return "fs" + strings.Replace(strings.TrimPrefix(n.tag, nsPrefix), "-", "x", 1)
}

func (n *network) ip(host int) string { return fmt.Sprintf("10.77.%d.%d", n.subnet, host) }

// addNode makes namespace <tag>-<name> with address 10.77.<subnet>.<host>
// on its eth0, linked to the bridge, and returns the namespace's name.
func (n *network) addNode(name string, host int) (string, error) {
	ns := n.tag + "-" + name
	if err := run("ip", "netns", "add", ns); err != nil {
		return "", err
	}
	n.nodes = append(n.nodes, ns)
	hubEnd := "v" + name
	steps := [][]string{
		{"ip", "link", "add", "eth0", "netns", ns, "type", "veth", "peer", "name", hubEnd, "netns", n.hub},
		{"ip", "netns", "exec", n.hub, "ip", "link", "set", hubEnd, "master", "br0", "up"},
		{"ip", "netns", "exec", ns, "ip", "addr", "add", n.ip(host) + "/24", "dev", "eth0"},
		{"ip", "netns", "exec", ns, "ip", "link", "set", "eth0", "up"},
		{"ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := run(s[0], s[1:]...); err != nil {
			return "", err
		}
	}
	return ns, nil
}

// close kills every process left in the network's namespaces and removes
// them (which removes their links, and the root's veth with its peer).
func (n *network) close() error {
	var errs []error
	for _, ns := range append(append([]string(nil), n.nodes...), n.hub) {
		if err := removeNS(ns); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeNS SIGKILLs every process in namespace ns (resuming stopped ones
// first) and deletes it.
func removeNS(ns string) error {
	if _, err := os.Stat(filepath.Join("/run/netns", ns)); err != nil {
		return nil
	}
	ino, err := nsInode(filepath.Join("/run/netns", ns))
	if err == nil {
		if err := waitfor.Poll(10*time.Second, func() error {
			pids := pidsInNet(ino)
			if len(pids) == 0 {
				return nil
			}
			for _, p := range pids {
				syscall.Kill(p, syscall.SIGCONT)
				syscall.Kill(p, syscall.SIGKILL)
			}
			return fmt.Errorf("processes %v do not die", pids)
		}); err != nil {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
	}
	return run("ip", "netns", "del", ns)
}

// nsInode returns the inode of a namespace file (/run/netns/X or
// /proc/PID/ns/net), which names the namespace.
func nsInode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// pidsInNet lists the live processes (not zombies) in the network namespace
// with inode ino.
func pidsInNet(ino uint64) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if i, err := nsInode(fmt.Sprintf("/proc/%d/ns/net", pid)); err != nil || i != ino {
			continue
		}
		if procState(pid) == 'Z' || procState(pid) == 0 {
			continue
		}
		pids = append(pids, pid)
	}
	return pids
}

// procState is the state letter of /proc/PID/stat (R, S, T, Z...), or 0
// when the process is gone.
func procState(pid int) byte {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 || len(b) < i+3 {
		return 0
	}
	return b[i+2]
}

// freeSubnet picks a third octet for 10.77.X.0/24 that no address of the
// root namespace uses.
func freeSubnet() (int, error) {
	out, err := exec.Command("ip", "-4", "-o", "addr").Output()
	if err != nil {
		return 0, fmt.Errorf("ip -4 addr: %w", err)
	}
	start := os.Getpid() % 200
	for i := range 250 {
		x := (start+i)%250 + 1
		if !bytes.Contains(out, fmt.Appendf(nil, " 10.77.%d.", x)) {
			return x, nil
		}
	}
	return 0, errors.New("no free 10.77.X.0/24 subnet")
}

// sweepStale removes the namespaces of earlier runs whose test process is
// gone (a run killed by a timeout cannot clean up after itself).
func sweepStale() {
	ents, _ := os.ReadDir("/run/netns")
	for _, e := range ents {
		rest, ok := strings.CutPrefix(e.Name(), nsPrefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() {
			continue
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
			continue // its run is still going
		}
		removeNS(e.Name())
	}
}

// canMakeNamespaces reports whether this process may make network
// namespaces and veths, and why not.
func canMakeNamespaces() error {
	if os.Geteuid() != 0 {
		return errors.New("not root")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s: %w", tool, err)
		}
	}
	ns := fmt.Sprintf("%s%d-probe", nsPrefix, os.Getpid())
	if err := run("ip", "netns", "add", ns); err != nil {
		return err
	}
	defer run("ip", "netns", "del", ns)
	if err := inNS(ns, "ip", "link", "add", "p0", "type", "veth", "peer", "name", "p1"); err != nil {
		return err
	}
	return inNS(ns, "iptables", "-A", "INPUT", "-s", "10.77.0.1", "-j", "DROP")
}
