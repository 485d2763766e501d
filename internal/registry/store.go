package registry

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unsafe"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Record is a unit as stored under units/<name>: its file, its desired
// state and the machine it is scheduled to, in one key, so that a unit
// started costs one write.
//
// The file is stored inline (File), or, for templates and their
// instances, once by content under files/<Content> (see ContentOf), so
// that a million instances of one template cost one file. Load fills File
// from Content. A record's Name is its key's; records written before
// Machine was kept here have their machine under schedule/<name>.
type Record struct {
	Name         string `json:"name,omitempty"`
	File         string `json:"file,omitempty"`
	Content      string `json:"content,omitempty"`
	DesiredState string `json:"desiredState"`
	Machine      string `json:"machine,omitempty"`
	// Rev is the record's etcd revision (its key's ModRevision) where Load
	// read it: a range record newer than it stands for it (RangeRecord).
	Rev int64 `json:"-"`
}

// MachineRecord is what the API changed of a machine, under machines/<id>.
// Metadata overrides the metadata the machine's daemon reports: a key with a
// nil value removes that key.
type MachineRecord struct {
	Metadata map[string]*string `json:"metadata"`
	// Drain is set by flotilla drain: the machine takes no units and its
	// units move elsewhere (stopped there first).
	Drain bool `json:"drain,omitempty"`
	// MaxParallel is how many instances of one template move off the
	// draining machine at once (0: one).
	MaxParallel int `json:"maxParallel,omitempty"`
}

// Snapshot is the whole durable record at one revision.
type Snapshot struct {
	Units []Record
	// Schedule is every unit's machine: a record's Machine, or its
	// schedule/ key (written before records held the machine).
	Schedule map[string]string // unit name -> machine ID
	// Legacy names the units with a schedule/ key: the next write of their
	// record deletes it.
	Legacy map[string]bool
	// Files are the stored unit files by content (files/<content>).
	Files map[string]string
	// Ranges are the ranges of template instances written at once
	// (ranges/): each instance it names takes its desired state, and is
	// created from its file if it has no record. They come oldest first
	// (by Rev), the order in which they apply (RangeRecord).
	Ranges []RangeRecord
	// Moves are the units moving off a machine: unit name -> the machine
	// whose copy must stop before the unit is placed again, or a handover
	// (see ParseMove).
	Moves    map[string]string
	Machines map[string]MachineRecord
	// SchedulerConfig is the stored placement policy (JSON), nil if never set.
	SchedulerConfig []byte
	// Versions are the units' version logs (versions/), by unit name;
	// VersionIndex is the cluster's version index and VersionsConfig the
	// stored versions setting (nil if never set).
	Versions       map[string]VersionLog
	Deployments    map[string]Deployment // by template
	VersionIndex   int64
	VersionsConfig []byte
	// Skipped names the keys whose values did not decode: they are left out
	// (and left in etcd), so that one bad record cannot keep every engine
	// from leading.
	Skipped  []string
	Revision int64
	// Changes is, in a Follower's snapshot, its count of changes applied
	// (Follower.Changes); 0 from Load.
	Changes uint64
}

// Load reads every unit and the schedule at one consistent revision.
// Large clusters are read in pages so no single response is unbounded.
func Load(ctx context.Context, cli *clientv3.Client, keys Keys) (*Snapshot, error) {
	first, err := cli.Get(ctx, keys.p(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, fmt.Errorf("registry: load: %w", err)
	}
	rev := first.Header.Revision
	snap := &Snapshot{Schedule: map[string]string{}, Legacy: map[string]bool{}, Files: map[string]string{},
		Moves: map[string]string{}, Machines: map[string]MachineRecord{}, Versions: map[string]VersionLog{}, Deployments: map[string]Deployment{}, Revision: rev}
	read := func(prefix string, fn func(key string, val []byte, rev int64) error) error {
		// Pages of 20,000 keys (about 4 MB of unit records), in etcd's
		// own key order: asking etcd to sort made it sort every page in
		// memory, and a new leader of a million units read 200 pages of
		// 5,000 one after another.
		const page = 20000
		start := prefix
		end := clientv3.GetPrefixRangeEnd(prefix)
		for {
			resp, err := cli.Get(ctx, start, clientv3.WithRange(end), clientv3.WithRev(rev), clientv3.WithLimit(page))
			if err != nil {
				return fmt.Errorf("registry: load %s: %w", prefix, err)
			}
			for _, kv := range resp.Kvs {
				if err := fn(string(kv.Key), kv.Value, kv.ModRevision); err != nil {
					return err
				}
			}
			if !resp.More || len(resp.Kvs) == 0 {
				return nil
			}
			start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
	err = read(keys.Files(), func(key string, val []byte, _ int64) error {
		snap.Files[strings.TrimPrefix(key, keys.Files())] = string(val)
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = read(keys.Schedules(), func(key string, val []byte, _ int64) error {
		name := strings.TrimPrefix(key, keys.Schedules())
		snap.Schedule[name] = string(val)
		snap.Legacy[name] = true
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = read(keys.Units(), func(key string, val []byte, rev int64) error {
		if r, ok := keys.decodeRecord(key, val, rev); !ok {
			snap.Skipped = append(snap.Skipped, key)
		} else {
			snap.addUnit(keys, key, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = read(keys.Ranges(), func(key string, val []byte, rev int64) error {
		if r, ok := decodeRange(key, val, rev); !ok {
			snap.Skipped = append(snap.Skipped, key)
		} else {
			snap.addRange(keys, r)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = read(keys.Moves(), func(key string, val []byte, _ int64) error {
		snap.Moves[strings.TrimPrefix(key, keys.Moves())] = string(val)
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = read(keys.Versions(), func(key string, val []byte, _ int64) error {
		if name, l, ok := keys.decodeVersionLog(key, val); ok {
			snap.Versions[name] = l
		} else {
			snap.Skipped = append(snap.Skipped, key)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = read(keys.Deployments(), func(key string, val []byte, _ int64) error {
		if d, ok := keys.decodeDeployment(key, val); ok {
			snap.Deployments[d.Unit] = d
		} else {
			snap.Skipped = append(snap.Skipped, key)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, one := range []struct {
		key  string
		into *[]byte
	}{{keys.SchedulerConfig(), &snap.SchedulerConfig}, {keys.VersionsConfig(), &snap.VersionsConfig}} {
		resp, err := cli.Get(ctx, one.key, clientv3.WithRev(rev))
		if err != nil {
			return nil, fmt.Errorf("registry: load %s: %w", one.key, err)
		}
		if len(resp.Kvs) > 0 {
			*one.into = resp.Kvs[0].Value
		}
	}
	if idx, err := cli.Get(ctx, keys.VersionIndex(), clientv3.WithRev(rev)); err != nil {
		return nil, fmt.Errorf("registry: load %s: %w", keys.VersionIndex(), err)
	} else if len(idx.Kvs) > 0 {
		n, err := strconv.ParseInt(string(idx.Kvs[0].Value), 10, 64)
		if err != nil {
			snap.Skipped = append(snap.Skipped, keys.VersionIndex())
		}
		snap.VersionIndex = n
	}
	for _, l := range snap.Versions { // an index behind its logs (a bad key) would repeat numbers
		snap.VersionIndex = max(snap.VersionIndex, l.Current().Index)
	}
	err = read(keys.Machines(), func(key string, val []byte, _ int64) error {
		var r MachineRecord
		if err := json.Unmarshal(val, &r); err != nil {
			snap.Skipped = append(snap.Skipped, key)
			return nil
		}
		snap.Machines[strings.TrimPrefix(key, keys.Machines())] = r
		return nil
	})
	if err != nil {
		return nil, err
	}
	snap.sortRanges()
	return snap, nil
}

// sortRanges puts the ranges oldest first.
func (snap *Snapshot) sortRanges() {
	slices.SortStableFunc(snap.Ranges, func(a, b RangeRecord) int { return cmp.Compare(a.Rev, b.Rev) })
}

// decodeRecord decodes the unit record at key, read at revision rev.
func (k Keys) decodeRecord(key string, val []byte, rev int64) (Record, bool) {
	r := Record{Rev: rev}
	if err := unmarshalRecord(val, &r); err != nil {
		return r, false
	}
	if r.Name == "" {
		r.Name = strings.TrimPrefix(key, k.Units())
	}
	return r, true
}

// decodeRange decodes the range record at key, read at revision rev.
func decodeRange(key string, val []byte, rev int64) (RangeRecord, bool) {
	r := RangeRecord{Rev: rev}
	if err := json.Unmarshal(val, &r); err != nil || r.check() != nil {
		return r, false
	}
	r.Key = key
	return r, true
}

// addUnit adds record r, read at key ("": its name's), to the snapshot,
// its file filled in from Files (which must be complete), or to Skipped
// when that is missing. The machine of a record wins over a schedule/ key.
func (snap *Snapshot) addUnit(keys Keys, key string, r Record) {
	if r.Content != "" {
		f, ok := snap.Files[r.Content]
		if !ok {
			if key == "" {
				key = keys.Unit(r.Name)
			}
			snap.Skipped = append(snap.Skipped, key+" (its file "+keys.File(r.Content)+" is missing)")
			return
		}
		r.File = f
	}
	if r.Machine != "" {
		snap.Schedule[r.Name] = r.Machine
	}
	snap.Units = append(snap.Units, r)
}

// addRange adds range r to the snapshot, or to Skipped when its file is
// missing from Files (which must be complete).
func (snap *Snapshot) addRange(keys Keys, r RangeRecord) {
	if _, ok := snap.Files[r.Content]; !ok {
		snap.Skipped = append(snap.Skipped, r.Key+" (its file "+keys.File(r.Content)+" is missing)")
		return
	}
	snap.Ranges = append(snap.Ranges, r)
}

// PutUnit is the op that stores a unit record (File or Content, not both).
func PutUnit(keys Keys, r Record) Op {
	name := r.Name
	r.Name = "" // the key's
	b := appendRecord(make([]byte, 0, 32+len(r.File)+len(r.Content)+len(r.DesiredState)+len(r.Machine)), r)
	return Op{Key: keys.Unit(name), Value: unsafe.String(unsafe.SliceData(b), len(b))} // b is never written again
}

// DeleteUnit is the op that removes a unit record.
func DeleteUnit(keys Keys, name string) Op { return Op{Key: keys.Unit(name), Delete: true} }

// PutSchedule is the op that schedules a unit to a machine.
func PutSchedule(keys Keys, name, machine string) Op {
	return Op{Key: keys.Schedule(name), Value: machine}
}

// PutMachine is the op that stores what the API set of a machine.
func PutMachine(keys Keys, id string, r MachineRecord) Op {
	b, _ := json.Marshal(r)
	return Op{Key: keys.Machine(id), Value: string(b)}
}

// PutMove is the op that records a unit moving off machine: it is placed
// again once that machine's copy is gone.
func PutMove(keys Keys, name, machine string) Op { return Op{Key: keys.Move(name), Value: machine} }

// handoverMark starts the value of a move that is a handover: the unit's
// record names its new machine, and its old copy runs on the machine
// named after the mark until the new one is active. A machine name has no
// ':'.
const handoverMark = "handover:"

// PutHandover is the op that records a unit of a draining machine started
// on another one while its copy on machine keeps running.
func PutHandover(keys Keys, name, machine string) Op {
	return Op{Key: keys.Move(name), Value: handoverMark + machine}
}

// ParseMove reads a value of Snapshot.Moves: the machine the unit moves
// off, and whether the move is a handover (PutHandover).
func ParseMove(v string) (machine string, handover bool) {
	if m, ok := strings.CutPrefix(v, handoverMark); ok {
		return m, true
	}
	return v, false
}

// DeleteMove is the op that forgets a move.
func DeleteMove(keys Keys, name string) Op { return Op{Key: keys.Move(name), Delete: true} }

// DeleteSchedule is the op that unschedules a unit.
func DeleteSchedule(keys Keys, name string) Op { return Op{Key: keys.Schedule(name), Delete: true} }

// MaxRecordBytes is the largest record (key and value) the registry
// writes: 1 MiB, under etcd's default --max-request-bytes (1.5 MiB) with
// room for the transaction around it. A request that would write a larger
// record is refused before anything is written (CheckRecord), instead of
// failing in etcd.
const MaxRecordBytes = 1 << 20

// ErrTooLarge is wrapped by CheckRecord's errors.
var ErrTooLarge = errors.New("record too large for etcd")

// CheckRecord returns an error wrapping ErrTooLarge when op would write a
// record over MaxRecordBytes; what names the record in the error (for
// example "machine m1's metadata").
func CheckRecord(what string, op Op) error {
	if n := len(op.Key) + len(op.Value); n > MaxRecordBytes {
		return fmt.Errorf("%w: %s would be stored as a %d-byte record; the limit is %d bytes (etcd refuses requests over its --max-request-bytes, 1.5 MiB by default)",
			ErrTooLarge, what, n, MaxRecordBytes)
	}
	return nil
}
