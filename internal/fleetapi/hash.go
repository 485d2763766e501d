package fleetapi

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	sdunit "github.com/coreos/go-systemd/v22/unit"
)

// Options returns a unit file's options as fleet read them (systemd's
// syntax through go-systemd: comments and blank lines dropped, continued
// lines joined, each option in file order).
func Options(raw string) ([]*UnitOption, error) {
	opts, err := sdunit.DeserializeOptions(strings.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("reading the unit file as fleet did: %w", err)
	}
	out := make([]*UnitOption, len(opts))
	for i, o := range opts {
		out[i] = &UnitOption{Section: o.Section, Name: o.Name, Value: o.Value}
	}
	return out, nil
}

// File returns the unit file fleet wrote from options: each section once,
// in the order it first appears, holding its options in the order given,
// one "Name=Value" a line, sections parted by a blank line.
func File(opts []*UnitOption) string {
	sd := make([]*sdunit.UnitOption, len(opts))
	for i, o := range opts {
		sd[i] = &sdunit.UnitOption{Section: o.Section, Name: o.Name, Value: o.Value}
	}
	b, _ := io.ReadAll(sdunit.Serialize(sd)) // a bytes.Buffer: never fails
	return string(b)
}

// Hash is fleet's hash of a unit: the hex SHA-1 of File(opts). fleetctl
// computes it from a unit's options (list-unit-files) and compares it with
// the hash of the states it reads (list-units).
func Hash(opts []*UnitOption) string {
	sum := sha1.Sum([]byte(File(opts)))
	return hex.EncodeToString(sum[:])
}

// HashFile is Hash of the options of a unit file.
func HashFile(raw string) (string, error) {
	opts, err := Options(raw)
	if err != nil {
		return "", err
	}
	return Hash(opts), nil
}
