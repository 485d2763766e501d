// Package service holds what the drivers that run units as systemd
// services (the exec and docker drivers, and the systemd driver's checks)
// share, so that Restart=, the start limit, Environment= and KillSignal=
// mean the same under each and no driver imports a sibling:
//
//   - systemd's vocabulary of how a run ended: the Result values
//     (ResultSuccess, ResultExitCode, ...; ResultFenced for Flotilla's
//     fence), ExitStatus and ExitResult, which classify an exit as systemd
//     does and format its status as systemd logs it;
//   - the restart rules of systemd.service(5): ShouldRestart for Restart=
//     and StartLimiter for StartLimitBurst=/StartLimitIntervalSec=;
//   - KillSignal= values: ParseSignal and SignalName;
//   - a unit's environment: Environment and UnitEnviron (Environment= and
//     EnvironmentFile=, read without blocking on FIFOs or devices and
//     refused inside the paths the daemon hides), ExpandArgv for ${NAME}
//     and $NAME in command lines, LookPath for a program in the unit's
//     PATH;
//   - the paths hidden from units: HiddenBy and Within;
//   - a driver's state directory: LockDir, which takes the flock that keeps
//     a second driver off it, and the unit logs in it (CheckName, LogPath,
//     RotatedPath, DefaultMaxLogBytes, DefaultMaxLogFiles), which
//     ReadJournal and WriteJournal read and follow, across rotations, for
//     "fleetctl journal".
//
// It starts no process and keeps no state beyond what its callers hold.
package service
