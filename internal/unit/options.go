package unit

import (
	"slices"
	"strings"
)

// The option tables list every option systemd accepts in the sections Flotilla
// knows, sorted so that they can be searched with slices.BinarySearch. They were
// built from systemd's man pages (systemd.unit(5) for [Unit] and [Install];
// systemd.service(5), systemd.exec(5), systemd.kill(5) and
// systemd.resource-control(5) for [Service]) and checked against systemd's
// load-fragment-gperf.gperf.in, which adds the newer options and the legacy
// spellings systemd still accepts. Options in these tables are accepted even
// when no driver acts on them; see serviceHandlers for the ones that are.

// unitOptions are the options of [Unit].
var unitOptions = []string{
	"After",
	"AllowIsolate",
	"AssertACPower",
	"AssertArchitecture",
	"AssertCPUFeature",
	"AssertCPUPressure",
	"AssertCPUs",
	"AssertCapability",
	"AssertControlGroupController",
	"AssertCredential",
	"AssertDirectoryNotEmpty",
	"AssertEnvironment",
	"AssertFileIsExecutable",
	"AssertFileNotEmpty",
	"AssertFirstBoot",
	"AssertGroup",
	"AssertHost",
	"AssertIOPressure",
	"AssertKernelCommandLine",
	"AssertKernelModuleLoaded",
	"AssertKernelVersion",
	"AssertMemory",
	"AssertMemoryPressure",
	"AssertNeedsUpdate",
	"AssertOSRelease",
	"AssertPathExists",
	"AssertPathExistsGlob",
	"AssertPathIsDirectory",
	"AssertPathIsEncrypted",
	"AssertPathIsMountPoint",
	"AssertPathIsReadWrite",
	"AssertPathIsSymbolicLink",
	"AssertSecurity",
	"AssertUser",
	"AssertVersion",
	"AssertVirtualization",
	"Before",
	"BindTo",
	"BindsTo",
	"CollectMode",
	"ConditionACPower",
	"ConditionArchitecture",
	"ConditionCPUFeature",
	"ConditionCPUPressure",
	"ConditionCPUs",
	"ConditionCapability",
	"ConditionControlGroupController",
	"ConditionCredential",
	"ConditionDirectoryNotEmpty",
	"ConditionEnvironment",
	"ConditionFileIsExecutable",
	"ConditionFileNotEmpty",
	"ConditionFirmware",
	"ConditionFirstBoot",
	"ConditionGroup",
	"ConditionHost",
	"ConditionIOPressure",
	"ConditionKernelCommandLine",
	"ConditionKernelModuleLoaded",
	"ConditionKernelVersion",
	"ConditionMemory",
	"ConditionMemoryPressure",
	"ConditionNeedsUpdate",
	"ConditionOSRelease",
	"ConditionPathExists",
	"ConditionPathExistsGlob",
	"ConditionPathIsDirectory",
	"ConditionPathIsEncrypted",
	"ConditionPathIsMountPoint",
	"ConditionPathIsReadWrite",
	"ConditionPathIsSymbolicLink",
	"ConditionSecurity",
	"ConditionUser",
	"ConditionVersion",
	"ConditionVirtualization",
	"Conflicts",
	"DefaultDependencies",
	"Description",
	"Documentation",
	"FailureAction",
	"FailureActionExitStatus",
	"IgnoreOnIsolate",
	"IgnoreOnSnapshot",
	"JobRunningTimeoutSec",
	"JobTimeoutAction",
	"JobTimeoutRebootArgument",
	"JobTimeoutSec",
	"JoinsNamespaceOf",
	"OnFailure",
	"OnFailureIsolate",
	"OnFailureJobMode",
	"OnSuccess",
	"OnSuccessJobMode",
	"PartOf",
	"PropagateReloadFrom",
	"PropagateReloadTo",
	"PropagatesReloadTo",
	"PropagatesStopTo",
	"RebootArgument",
	"RefuseManualStart",
	"RefuseManualStop",
	"ReloadPropagatedFrom",
	"Requires",
	"RequiresMountsFor",
	"RequiresOverridable",
	"Requisite",
	"RequisiteOverridable",
	"SourcePath",
	"StartLimitAction",
	"StartLimitBurst",
	"StartLimitInterval",
	"StartLimitIntervalSec",
	"StopPropagatedFrom",
	"StopWhenUnneeded",
	"SuccessAction",
	"SuccessActionExitStatus",
	"SurviveFinalKillSignal",
	"Upholds",
	"Wants",
	"WantsMountsFor",
}

// serviceOptions are the options of [Service].
var serviceOptions = []string{
	"AllowedCPUs",
	"AllowedMemoryNodes",
	"AmbientCapabilities",
	"AppArmorProfile",
	"BPFDelegateAttachments",
	"BPFDelegateCommands",
	"BPFDelegateMaps",
	"BPFDelegatePrograms",
	"BPFProgram",
	"BindLogSockets",
	"BindPaths",
	"BindReadOnlyPaths",
	"BlockIOAccounting",
	"BlockIODeviceWeight",
	"BlockIOReadBandwidth",
	"BlockIOWeight",
	"BlockIOWriteBandwidth",
	"BusName",
	"BusPolicy",
	"CPUAccounting",
	"CPUAffinity",
	"CPUQuota",
	"CPUQuotaPeriodSec",
	"CPUSchedulingPolicy",
	"CPUSchedulingPriority",
	"CPUSchedulingResetOnFork",
	"CPUShares",
	"CPUWeight",
	"CacheDirectory",
	"CacheDirectoryAccounting",
	"CacheDirectoryMode",
	"CacheDirectoryQuota",
	"Capabilities",
	"CapabilityBoundingSet",
	"ConfigurationDirectory",
	"ConfigurationDirectoryMode",
	"CoredumpFilter",
	"CoredumpReceive",
	"DefaultMemoryLow",
	"DefaultMemoryMin",
	"DefaultStartupMemoryLow",
	"Delegate",
	"DelegateNamespaces",
	"DelegateSubgroup",
	"DeviceAllow",
	"DevicePolicy",
	"DisableControllers",
	"DynamicUser",
	"Environment",
	"EnvironmentFile",
	"ExecCondition",
	"ExecPaths",
	"ExecReload",
	"ExecSearchPath",
	"ExecStart",
	"ExecStartPost",
	"ExecStartPre",
	"ExecStop",
	"ExecStopPost",
	"ExitType",
	"ExtensionDirectories",
	"ExtensionImagePolicy",
	"ExtensionImages",
	"FailureAction",
	"FileDescriptorStoreMax",
	"FileDescriptorStorePreserve",
	"FinalKillSignal",
	"Group",
	"GuessMainPID",
	"IOAccounting",
	"IODeviceLatencyTargetSec",
	"IODeviceWeight",
	"IOReadBandwidthMax",
	"IOReadIOPSMax",
	"IOSchedulingClass",
	"IOSchedulingPriority",
	"IOWeight",
	"IOWriteBandwidthMax",
	"IOWriteIOPSMax",
	"IPAccounting",
	"IPAddressAllow",
	"IPAddressDeny",
	"IPCNamespacePath",
	"IPEgressFilterPath",
	"IPIngressFilterPath",
	"IgnoreSIGPIPE",
	"ImportCredential",
	"InaccessibleDirectories",
	"InaccessiblePaths",
	"KeyringMode",
	"KillMode",
	"KillSignal",
	"LandlockConfig",
	"LimitAS",
	"LimitCORE",
	"LimitCPU",
	"LimitDATA",
	"LimitFSIZE",
	"LimitLOCKS",
	"LimitMEMLOCK",
	"LimitMSGQUEUE",
	"LimitNICE",
	"LimitNOFILE",
	"LimitNPROC",
	"LimitRSS",
	"LimitRTPRIO",
	"LimitRTTIME",
	"LimitSIGPENDING",
	"LimitSTACK",
	"LoadCredential",
	"LoadCredentialEncrypted",
	"LockPersonality",
	"LogExtraFields",
	"LogFilterPatterns",
	"LogLevelMax",
	"LogNamespace",
	"LogRateLimitBurst",
	"LogRateLimitIntervalSec",
	"LogsDirectory",
	"LogsDirectoryAccounting",
	"LogsDirectoryMode",
	"LogsDirectoryQuota",
	"ManagedOOMMemoryPressure",
	"ManagedOOMMemoryPressureDurationSec",
	"ManagedOOMMemoryPressureLimit",
	"ManagedOOMPreference",
	"ManagedOOMSwap",
	"MemoryAccounting",
	"MemoryDenyWriteExecute",
	"MemoryHigh",
	"MemoryKSM",
	"MemoryLimit",
	"MemoryLow",
	"MemoryMax",
	"MemoryMin",
	"MemoryPressureThresholdSec",
	"MemoryPressureWatch",
	"MemorySwapMax",
	"MemoryZSwapMax",
	"MemoryZSwapWriteback",
	"MountAPIVFS",
	"MountFlags",
	"MountImagePolicy",
	"MountImages",
	"NFTSet",
	"NUMAMask",
	"NUMAPolicy",
	"NetClass",
	"NetworkNamespacePath",
	"Nice",
	"NoExecPaths",
	"NoNewPrivileges",
	"NonBlocking",
	"NotifyAccess",
	"OOMPolicy",
	"OOMScoreAdjust",
	"OpenFile",
	"PAMName",
	"PIDFile",
	"PassEnvironment",
	"PermissionsStartOnly",
	"Personality",
	"PrivateBPF",
	"PrivateDevices",
	"PrivateIPC",
	"PrivateMounts",
	"PrivateNetwork",
	"PrivatePIDs",
	"PrivateTmp",
	"PrivateUsers",
	"ProcSubset",
	"ProtectClock",
	"ProtectControlGroups",
	"ProtectHome",
	"ProtectHostname",
	"ProtectKernelLogs",
	"ProtectKernelModules",
	"ProtectKernelTunables",
	"ProtectProc",
	"ProtectSystem",
	"ReadOnlyDirectories",
	"ReadOnlyPaths",
	"ReadWriteDirectories",
	"ReadWritePaths",
	"RebootArgument",
	"ReloadSignal",
	"RemainAfterExit",
	"RemoveIPC",
	"Restart",
	"RestartForceExitStatus",
	"RestartKillSignal",
	"RestartMaxDelaySec",
	"RestartMode",
	"RestartPreventExitStatus",
	"RestartSec",
	"RestartSteps",
	"RestrictAddressFamilies",
	"RestrictFileSystems",
	"RestrictNamespaces",
	"RestrictNetworkInterfaces",
	"RestrictRealtime",
	"RestrictSUIDSGID",
	"RootDirectory",
	"RootDirectoryStartOnly",
	"RootEphemeral",
	"RootHash",
	"RootHashSignature",
	"RootImage",
	"RootImageOptions",
	"RootImagePolicy",
	"RootVerity",
	"RuntimeDirectory",
	"RuntimeDirectoryMode",
	"RuntimeDirectoryPreserve",
	"RuntimeMaxSec",
	"RuntimeRandomizedExtraSec",
	"SELinuxContext",
	"SecureBits",
	"SendSIGHUP",
	"SendSIGKILL",
	"SetCredential",
	"SetCredentialEncrypted",
	"SetLoginEnvironment",
	"Slice",
	"SmackProcessLabel",
	"SocketBindAllow",
	"SocketBindDeny",
	"Sockets",
	"StandardError",
	"StandardInput",
	"StandardInputData",
	"StandardInputText",
	"StandardOutput",
	"StartLimitAction",
	"StartLimitBurst",
	"StartLimitInterval",
	"StartupAllowedCPUs",
	"StartupAllowedMemoryNodes",
	"StartupBlockIOWeight",
	"StartupCPUShares",
	"StartupCPUWeight",
	"StartupIOWeight",
	"StartupMemoryHigh",
	"StartupMemoryLow",
	"StartupMemoryMax",
	"StartupMemorySwapMax",
	"StartupMemoryZSwapMax",
	"StateDirectory",
	"StateDirectoryAccounting",
	"StateDirectoryMode",
	"StateDirectoryQuota",
	"SuccessExitStatus",
	"SupplementaryGroups",
	"SysVStartPriority",
	"SyslogFacility",
	"SyslogIdentifier",
	"SyslogLevel",
	"SyslogLevelPrefix",
	"SystemCallArchitectures",
	"SystemCallErrorNumber",
	"SystemCallFilter",
	"SystemCallLog",
	"TTYColumns",
	"TTYPath",
	"TTYReset",
	"TTYRows",
	"TTYVHangup",
	"TTYVTDisallocate",
	"TasksAccounting",
	"TasksMax",
	"TemporaryFileSystem",
	"TimeoutAbortSec",
	"TimeoutCleanSec",
	"TimeoutSec",
	"TimeoutStartFailureMode",
	"TimeoutStartSec",
	"TimeoutStopFailureMode",
	"TimeoutStopSec",
	"TimerSlackNSec",
	"Type",
	"UMask",
	"USBFunctionDescriptors",
	"USBFunctionStrings",
	"UnsetEnvironment",
	"User",
	"UtmpIdentifier",
	"UtmpMode",
	"WatchdogSec",
	"WatchdogSignal",
	"WorkingDirectory",
}

// installOptions are the options of [Install].
var installOptions = []string{
	"Alias",
	"Also",
	"DefaultInstance",
	"RequiredBy",
	"UpheldBy",
	"WantedBy",
}

// fleetOptions are the options of [X-Fleet], fleet's placement section.
var fleetOptions = []string{
	"Conflicts",
	"Global",
	"LogMaxFiles",
	"LogMaxSize",
	"LostAfter",
	"MachineID",
	"MachineMetadata",
	"MachineOf",
	"Placement",
	"Replaces",
	"Role",
	"Singleton",
}

// deprecatedFleetOptions maps fleet's old [X-Fleet] spellings to the current
// ones. They are accepted with a warning.
var deprecatedFleetOptions = map[string]string{
	"X-ConditionMachineID":       "MachineID",
	"X-ConditionMachineMetadata": "MachineMetadata",
	"X-ConditionMachineOf":       "MachineOf",
	"X-Conflicts":                "Conflicts",
}

// obsoleteOptions are options systemd still parses but ignores (it logs that
// they are unsupported). They are accepted with a warning, because a user
// would expect them to have an effect.
var obsoleteOptions = map[string]string{
	"BlockIOAccounting":     "IOAccounting=",
	"BlockIODeviceWeight":   "IODeviceWeight=",
	"BlockIOReadBandwidth":  "IOReadBandwidthMax=",
	"BlockIOWeight":         "IOWeight=",
	"BlockIOWriteBandwidth": "IOWriteBandwidthMax=",
	"BusPolicy":             "",
	"CPUShares":             "CPUWeight=",
	"Capabilities":          "CapabilityBoundingSet= and AmbientCapabilities=",
	"IgnoreOnSnapshot":      "",
	"NetClass":              "",
	"RequiresOverridable":   "Requires=",
	"RequisiteOverridable":  "Requisite=",
	"StartupBlockIOWeight":  "StartupIOWeight=",
	"StartupCPUShares":      "StartupCPUWeight=",
	"SysVStartPriority":     "",
}

// Section names, in the order the canonical serialization (see hash.go) uses.
// The order of the first four must not change: it is in every stored hash.
const (
	sectionUnit      = "Unit"
	sectionService   = "Service"
	sectionInstall   = "Install"
	sectionFleet     = "X-Fleet"
	sectionSocket    = "Socket"
	sectionTimer     = "Timer"
	sectionPath      = "Path"
	sectionMount     = "Mount"
	sectionAutomount = "Automount"
	sectionSwap      = "Swap"
	sectionContainer = "X-Container"
	sectionCheck     = "X-Check"
	sectionUpdate    = "X-Update"
)

var sections = []string{
	sectionUnit, sectionService, sectionInstall, sectionFleet,
	sectionSocket, sectionTimer, sectionPath, sectionMount, sectionAutomount, sectionSwap,
	sectionContainer, sectionCheck, sectionUpdate,
}

// sectionIndex returns the position of section in sections, or -1.
func sectionIndex(section string) int {
	return slices.Index(sections, section)
}

// optionTable returns the sorted table of section's options.
func optionTable(section string) []string {
	switch section {
	case sectionUnit:
		return unitOptions
	case sectionService:
		return serviceOptions
	case sectionInstall:
		return installOptions
	case sectionFleet:
		return fleetOptions
	case sectionSocket:
		return socketOptions
	case sectionTimer:
		return timerOptions
	case sectionPath:
		return pathOptions
	case sectionMount:
		return mountOptions
	case sectionAutomount:
		return automountOptions
	case sectionSwap:
		return swapOptions
	case sectionContainer:
		return containerOptions
	case sectionCheck:
		return checkOptions
	case sectionUpdate:
		return updateOptions
	}
	return nil
}

// knownOption reports whether name is an option of section. Deprecated
// [X-Fleet] spellings are not included; see deprecatedFleetOptions.
func knownOption(section, name string) bool {
	_, ok := slices.BinarySearch(optionTable(section), name)
	return ok
}

// suggestOption returns the option of section closest to name (ignoring
// case, within an edit distance of 2), or "".
func suggestOption(section, name string) string {
	return closest(name, optionTable(section))
}

// suggestSection returns the known section closest to name, or "".
func suggestSection(name string) string {
	return closest(name, sections)
}

// otherSection returns a section other than section that has an option
// spelled exactly name, or "".
func otherSection(section, name string) string {
	for _, s := range sections {
		if s != section && knownOption(s, name) {
			return s
		}
	}
	return ""
}

// maxSuggestDistance is the largest edit distance for a "did you mean".
const maxSuggestDistance = 2

// closest returns the candidate with the smallest case-insensitive edit
// distance to s, if that distance is at most maxSuggestDistance. Ties go to
// the earlier candidate.
func closest(s string, candidates []string) string {
	best, bestDist := "", maxSuggestDistance+1
	ls := strings.ToLower(s)
	for _, c := range candidates {
		if d := editDistance(ls, strings.ToLower(c)); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance returns the optimal string alignment distance between a and b:
// the number of insertions, deletions, substitutions and transpositions of
// adjacent bytes that turn a into b. It gives up early, returning
// maxSuggestDistance+1, when the lengths alone rule out a suggestion.
func editDistance(a, b string) int {
	if d := len(a) - len(b); d > maxSuggestDistance || -d > maxSuggestDistance {
		return maxSuggestDistance + 1
	}
	// Three rows of the dynamic programming matrix: two back, one back, current.
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
