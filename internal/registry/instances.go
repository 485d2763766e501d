package registry

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func (k Keys) Files() string              { return k.p() + "files/" }
func (k Keys) File(content string) string { return k.Files() + content }
func (k Keys) Ranges() string             { return k.p() + "ranges/" }
func (k Keys) Range(r RangeRecord) string {
	return k.Ranges() + r.Template + "/" + strconv.Itoa(r.From) + "-" + strconv.Itoa(r.To)
}

// ContentOf is the key under files/ of a unit file's text: the first 128
// bits of its SHA-256, in hex.
func ContentOf(text string) string {
	h := sha256.Sum256([]byte(text))
	return hex.EncodeToString(h[:16])
}

// PutFile is the op that stores a unit file by content.
func PutFile(keys Keys, text string) Op { return Op{Key: keys.File(ContentOf(text)), Value: text} }

// DeleteFile is the op that removes a file no record names any more.
func DeleteFile(keys Keys, content string) Op { return Op{Key: keys.File(content), Delete: true} }

// RangeRecord gives instances From to To of Template (numbered as
// unit.Range numbers them, padded to Width digits) the desired state
// DesiredState; an instance without a record is created from the file
// stored under files/<Content>. It is written in one key when a request
// names a range, and deleted once each instance has a newer record.
//
// A range stands for the instances whose record is older than it (by
// etcd's revisions, Rev and Record.Rev), and of several ranges naming an
// instance the newest stands for it: so a million instances stopped stay
// one key, while an instance changed after the range has its own record,
// which then wins. (Before records were compared by revision, a range was
// always written out to records before any later change: every range in
// etcd was newer than the records it named, which this rule reads the same.)
type RangeRecord struct {
	Template     string `json:"template"`
	From         int    `json:"from"`
	To           int    `json:"to"`
	Width        int    `json:"width,omitempty"`
	Content      string `json:"content"`
	DesiredState string `json:"desiredState"`
	// Key is where Load found it, and Rev its etcd revision there.
	Key string `json:"-"`
	Rev int64  `json:"-"`
}

func (r RangeRecord) check() error {
	if r.Template == "" || r.Content == "" || r.DesiredState == "" || r.From < 0 || r.To < r.From || r.Width < 0 || r.Width > 20 {
		return fmt.Errorf("registry: bad range record %+v", r)
	}
	return nil
}

// PutRange is the op that stores a range record.
func PutRange(keys Keys, r RangeRecord) Op {
	b, _ := json.Marshal(r)
	return Op{Key: keys.Range(r), Value: string(b)}
}

// DeleteRange is the op that removes the range record at key.
func DeleteRange(key string) Op { return Op{Key: key, Delete: true} }

// CountScheduled returns how many units etcd schedules to machine: the
// records naming it, and the schedule/ keys of the former layout. It reads
// the records in pages.
func CountScheduled(ctx context.Context, cli *clientv3.Client, keys Keys, machine string) (int, error) {
	n := 0
	for _, prefix := range []string{keys.Units(), keys.Schedules()} {
		start, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
		for {
			resp, err := cli.Get(ctx, start, clientv3.WithRange(end), clientv3.WithLimit(5000),
				clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
			if err != nil {
				return 0, fmt.Errorf("registry: read %s: %w", prefix, err)
			}
			for _, kv := range resp.Kvs {
				if prefix == keys.Schedules() {
					if string(kv.Value) == machine {
						n++
					}
					continue
				}
				var r Record
				if json.Unmarshal(kv.Value, &r) == nil && r.Machine == machine {
					n++
				}
			}
			if !resp.More || len(resp.Kvs) == 0 {
				break
			}
			start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
		}
	}
	return n, nil
}
