package engine

import "golang.org/x/sys/unix"

// backgroundNice is the niceness of a thread doing background work.
const backgroundNice = 19

// lowerThreadPriority makes the calling thread yield the CPU to every
// other thread of the machine (nice 19). The caller has locked its
// goroutine to the thread and never unlocks it, so the thread ends with
// the goroutine and its niceness with it.
func lowerThreadPriority() error {
	return unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), backgroundNice)
}
