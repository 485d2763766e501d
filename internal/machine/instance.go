package machine

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// InstanceFile is the file, in a daemon's data dir, that holds the dir's
// instance ID.
const InstanceFile = "instance"

// Instance returns the instance ID of the data dir: 32 hex digits, made at
// random and written to dir/instance on first use. It tells a daemon
// restarted on the same machine (the same data dir, the same instance)
// from another machine given the same name (another data dir): the leader
// lets the first take its machine over at once and refuses the second
// while the machine is live. A data dir copied to another machine carries
// its instance with it, as it carries the machine's units' state.
func Instance(dir string) (string, error) {
	path := filepath.Join(dir, InstanceFile)
	for range 2 {
		b, err := os.ReadFile(path)
		if err == nil {
			id := strings.TrimSpace(string(b))
			if !validInstance(id) {
				return "", fmt.Errorf("%s holds %.40q, not an instance ID (32 hex digits): remove it and a new one is made", path, id)
			}
			return id, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", err
		}
		var raw [16]byte
		rand.Read(raw[:])
		id := hex.EncodeToString(raw[:])
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, fs.ErrExist) {
			continue // made meanwhile: read it
		}
		if err != nil {
			return "", err
		}
		_, werr := f.WriteString(id + "\n")
		if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
			os.Remove(path)
			return "", fmt.Errorf("writing %s: %w", path, err)
		}
		return id, nil
	}
	return "", fmt.Errorf("%s: made and removed while reading it", path)
}

func validInstance(id string) bool {
	if len(id) != 32 {
		return false
	}
	_, err := hex.DecodeString(id)
	return err == nil
}
