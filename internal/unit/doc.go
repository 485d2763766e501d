// Package unit parses and validates Flotilla's unit files: systemd units
// with fleet's [X-Fleet] placement section.
//
// # Names and types
//
// A unit is named "prefix.type", a template "prefix@.type", or an instance
// of a template "prefix@instance.type", where type is service, socket,
// timer, path, mount, automount, swap or target, the types fleet scheduled;
// see ValidateName. IsTemplate, IsInstance, TemplateOf, Prefix, Instance and
// TypeOf take names apart.
//
// Each type has its own section ([Service], [Socket], [Timer], …), checked
// against systemd's option tables, and what systemd needs of the whole file
// (a timer's trigger, a mount's What= and Where= matching its name). A
// service may instead have an [X-Container] section (Container): it then
// runs as a container of its Image=. File.Drivers says which drivers can run
// a unit: services the exec driver supervises under exec or systemd,
// containers under docker, and Type=forking services and every other type
// under systemd only; the scheduler places a unit only on machines running
// one of them. A socket, timer or path unit is placed where the unit it
// activates is (File.Triggers, an implicit MachineOf=).
//
// # Files
//
// Parse reads a unit file with go-systemd's parser, after checking its
// syntax line by line so that errors name the line. It accepts the sections
// [Unit], [Service], [Install] and [X-Fleet], and in each only the options
// systemd (or fleet) defines there; the option tables in options.go come
// from systemd's man pages and its option parser. Unknown sections and
// options are errors, with a "did you mean" when a known name is close or
// when the option belongs in another section.
//
// The options drivers act on are validated and stored in File.Service:
// Exec*= command lines split with systemd's quoting rules (SplitWords) and
// prefixes, Environment= and EnvironmentFile=, Type=, Restart=, time spans in
// systemd's syntax, CPUQuota=, MemoryMax= and the rest of the Service
// fields. Parse applies systemd's defaults (Service.Defaults) to the options
// the file leaves out, so drivers do not see zeros standing for "unset".
// Options no driver acts on are accepted silently, except for a short list
// whose absence a user would notice (such as Type=forking, run as
// Type=simple, or the Exec prefixes "@", ":", "+", "!" and "!!"), which add
// a warning to File.Warnings.
//
// MemoryMax= (and the legacy MemoryLimit=) given as a percentage is
// rejected: the percentage is of the memory of the machine that will run the
// unit, which is not known when the unit is submitted.
//
// # Fleet options
//
// [X-Fleet] holds fleet's scheduling options, stored in File.Fleet:
// MachineID=, MachineOf=, MachineMetadata=, Conflicts=, Global=, Replaces=
// and Role=, and Flotilla's cut-off policy: LostAfter= (a time span or
// "infinity": how long the unit's machine may go unheard before the unit is
// started elsewhere; default the cluster's agent TTL) and Singleton= (the
// unit never runs on two machines at once: a cut-off machine kills its copy
// once LostAfter= has passed, before the leader places another), and the
// unit's log limits on its machine: LogMaxSize= (a size of at least 1K at
// which the log is rotated) and LogMaxFiles= (rotated files kept, 0 to 100),
// each defaulting to the daemon's --log-max-size and --log-max-files. List options take several space-separated, optionally quoted
// values per line and may be repeated; an empty assignment clears them.
// fleet's deprecated spellings (X-ConditionMachineID=, X-ConditionMachineOf=,
// X-ConditionMachineMetadata=, X-Conflicts=) are accepted with a warning.
// Combinations fleet could never schedule are rejected: MachineID= with
// MachineOf=, Conflicts=, Global= or Replaces=; Global= with MachineOf=,
// Replaces=, Singleton= or LostAfter= (global units are never replaced); Conflicts= with Replaces=; and a MachineOf= unit matching a
// Conflicts= pattern. ParseMetadata parses a machine's metadata and
// MetadataRequirements a unit's requirements on it.
//
// # Templates and specifiers
//
// Instantiate makes an instance from a template. As in fleet, the
// specifiers %n (full name), %N (name without ".service"), %p (prefix), %i
// (instance) and %% are expanded in [X-Fleet] values of every unit that is
// not a template, and in [Service] values as systemd does (a template keeps
// them for its instances). Other specifiers are kept as written, except
// "%%", which becomes "%".
//
// # Hashes
//
// A File's Hash is the hex SHA-1 of a canonical form of its options, so that
// comments, blank lines, spacing and line continuations do not change it
// while any change of meaning does; ShortHash abbreviates it to the 7
// characters fleetctl showed.
package unit
