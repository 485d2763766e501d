package registry

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Versions of unit files. Every change of the file of a unit that is not a
// template's instance (a template, or a unit of its own) makes a version:
// its log, oldest first, is one key, versions/<name>, written in the same
// round as the record. A version names its file by content (ContentOf);
// the file of every version but a plain unit's current one is stored once
// under files/ beside the templates' (a plain unit's current file is in its
// record). Instances have no log: they follow their template's.
//
// Each version takes the next number of the cluster's version index,
// config/version-index, written with it: the index only grows, even when a
// unit is destroyed and submitted again, so a write can be checked against
// the index a plan saw (?check-index=).

// Version is one version of a unit's file.
type Version struct {
	Version int    `json:"version"`
	Hash    string `json:"hash"`    // the unit file's hash (unit.File.Hash)
	Content string `json:"content"` // its key under files/ (ContentOf)
	// Index is the cluster's version index when it was made.
	Index  int64     `json:"index"`
	Time   time.Time `json:"time"`
	By     string    `json:"by,omitempty"`  // the token or certificate that made it
	Change string    `json:"change"`        // what made it: "created", "replaced", "reverted to 3"
	Tag    string    `json:"tag,omitempty"` // a name that keeps it
}

// VersionLog is the versions of one unit, oldest first; the last is the
// current one.
type VersionLog struct {
	Versions []Version `json:"versions"`
}

// Current returns the log's last version.
func (l VersionLog) Current() Version {
	if len(l.Versions) == 0 {
		return Version{}
	}
	return l.Versions[len(l.Versions)-1]
}

// Find returns version n of the log.
func (l VersionLog) Find(n int) (Version, bool) {
	for _, v := range l.Versions {
		if v.Version == n {
			return v, true
		}
	}
	return Version{}, false
}

// DefaultKeepVersions is how many versions of a unit are kept when the
// cluster's setting does not say (tagged versions are kept besides).
const DefaultKeepVersions = 10

// MaxKeepVersions bounds the setting: a log is one etcd key.
const MaxKeepVersions = 100

// Trim drops the oldest untagged versions beyond keep (the current one is
// always kept) and returns the log.
func (l VersionLog) Trim(keep int) VersionLog {
	keep = max(keep, 1)
	untagged := 0
	for _, v := range l.Versions {
		if v.Tag == "" {
			untagged++
		}
	}
	out := make([]Version, 0, len(l.Versions))
	for i, v := range l.Versions {
		if v.Tag == "" && untagged > keep && i != len(l.Versions)-1 {
			untagged--
			continue
		}
		out = append(out, v)
	}
	return VersionLog{Versions: out}
}

func (k Keys) Versions() string              { return k.p() + "versions/" }
func (k Keys) VersionLog(name string) string { return k.Versions() + name }
func (k Keys) VersionIndex() string          { return k.p() + "config/version-index" }
func (k Keys) VersionsConfig() string        { return k.p() + "config/versions" }

// VersionsConfig is the cluster's setting for versions (config/versions).
type VersionsConfig struct {
	// Keep is how many versions of each unit are kept (0: the default).
	Keep int `json:"keep"`
}

// Check refuses a setting out of bounds, naming it.
func (c VersionsConfig) Check() error {
	if c.Keep < 0 || c.Keep > MaxKeepVersions {
		return fmt.Errorf("keep %d: want 1 to %d (0: the default, %d)", c.Keep, MaxKeepVersions, DefaultKeepVersions)
	}
	return nil
}

// KeepOrDefault is Keep, or DefaultKeepVersions when 0.
func (c VersionsConfig) KeepOrDefault() int {
	if c.Keep == 0 {
		return DefaultKeepVersions
	}
	return c.Keep
}

// PutVersionLog is the op that stores unit name's version log.
func PutVersionLog(keys Keys, name string, l VersionLog) Op {
	b, _ := json.Marshal(l) // strings, numbers and times always marshal
	return Op{Key: keys.VersionLog(name), Value: string(b)}
}

// DeleteVersionLog is the op that removes unit name's version log.
func DeleteVersionLog(keys Keys, name string) Op {
	return Op{Key: keys.VersionLog(name), Delete: true}
}

// PutVersionIndex is the op that stores the cluster's version index.
func PutVersionIndex(keys Keys, index int64) Op {
	return Op{Key: keys.VersionIndex(), Value: strconv.FormatInt(index, 10)}
}

// PutVersionsConfig is the op that stores the versions setting.
func PutVersionsConfig(keys Keys, c VersionsConfig) Op {
	b, _ := json.Marshal(c)
	return Op{Key: keys.VersionsConfig(), Value: string(b)}
}

// decodeVersionLog decodes the log at key.
func (k Keys) decodeVersionLog(key string, val []byte) (string, VersionLog, bool) {
	var l VersionLog
	if err := json.Unmarshal(val, &l); err != nil || len(l.Versions) == 0 {
		return "", l, false
	}
	return strings.TrimPrefix(key, k.Versions()), l, true
}
