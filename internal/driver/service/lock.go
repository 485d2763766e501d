package service

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// LockDir makes a driver's state directory dir with its logs/ and run/
// subdirectories and takes the flock on run/lock that keeps a second
// driver off it: one in another process makes it fail with an error
// wrapping errInUse. Errors name the driver by what. The lock is held
// until the returned file is closed.
func LockDir(dir, what string, errInUse error) (*os.File, error) {
	for _, sub := range []string{"logs", "run"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o750); err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
	}
	lockPath := filepath.Join(dir, "run", "lock")
	lock, err := os.OpenFile(lockPath, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", errInUse, dir)
		}
		return nil, fmt.Errorf("%s: lock %s: %w", what, lockPath, err)
	}
	return lock, nil
}
